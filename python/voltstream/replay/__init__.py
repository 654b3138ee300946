"""``voltstream replay``: a recording sent back over UDP, paced (issue 12).

``sources`` turns each kind of recording into batches of packets, ``pcap`` reads
pcap files, ``dada_source`` rebuilds packets from DADA samples, ``run`` sends them
on one pacing schedule and reports, ``cli`` is the verb. See docs/replay.md.
"""
