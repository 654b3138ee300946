//! The kernel's own drop counters outside the capture's socket or ring, read as
//! context for the capture's counters.
//!
//! Sources, and how far each reaches (what else it counts):
//! - `/proc/net/snmp`, `Udp:` lines: `RcvbufErrors` (datagrams dropped because
//!   a socket's receive queue was full), `InErrors` (every UDP receive error,
//!   `RcvbufErrors` and checksum errors included), `InCsumErrors`, `NoPorts`
//!   (datagrams to a port nobody listens on). **Network-namespace wide**: every
//!   UDP socket of the capture's namespace adds to them, as do the packet-ring
//!   and AF_XDP engines' guard sockets, whose drop-all filter counts each of
//!   their flow's datagrams that reaches the stack in `InErrors`.
//! - `/proc/net/softnet_stat`: per CPU, column 2 `dropped` (the backlog queue
//!   of receive packet steering or a non-NAPI driver was full) and column 3
//!   `time_squeeze` (the receive softirq ran out of budget or time with work
//!   left: a sign of a CPU that cannot keep up, not itself a loss). **Host
//!   wide**: summed over CPUs, all interfaces, all namespaces.
//! - `/sys/class/net/<if>/statistics/rx_dropped` and `rx_missed_errors`: the
//!   interface's drops (the stack or the driver could not take the frame; the
//!   NIC's FIFO overflowed). **Interface wide**, every flow on it; only when
//!   the engine knows its interface.
//!
//! Every value is the change since the capture started. A file or column that
//! does not exist (another kernel, a virtual interface without the counter)
//! leaves that value absent (`None`); nothing here is an error.

use std::io::Read;
use std::path::PathBuf;

/// The kernel's counters outside the capture (absolute readings or changes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// The network namespace's UDP counters, as `/proc/net/snmp` has them.
    pub udp: UdpSnmp,
    pub softnet_dropped: Option<u64>,
    pub softnet_time_squeeze: Option<u64>,
    pub if_rx_dropped: Option<u64>,
    pub if_rx_missed_errors: Option<u64>,
}

impl HostCounters {
    /// Number of fields, in the order of [`HostCounters::to_array`].
    pub const FIELDS: usize = 8;
    /// Names of the fields as reports print them.
    pub const NAMES: [&'static str; Self::FIELDS] = [
        "udp_rcvbuf_errors",
        "udp_in_errors",
        "udp_in_csum_errors",
        "udp_no_ports",
        "softnet_dropped",
        "softnet_time_squeeze",
        "if_rx_dropped",
        "if_rx_missed_errors",
    ];

    pub fn to_array(&self) -> [Option<u64>; Self::FIELDS] {
        [
            self.udp.rcvbuf_errors,
            self.udp.in_errors,
            self.udp.in_csum_errors,
            self.udp.no_ports,
            self.softnet_dropped,
            self.softnet_time_squeeze,
            self.if_rx_dropped,
            self.if_rx_missed_errors,
        ]
    }

    pub fn from_array(a: [Option<u64>; Self::FIELDS]) -> Self {
        HostCounters {
            udp: UdpSnmp {
                rcvbuf_errors: a[0],
                in_errors: a[1],
                in_csum_errors: a[2],
                no_ports: a[3],
            },
            softnet_dropped: a[4],
            softnet_time_squeeze: a[5],
            if_rx_dropped: a[6],
            if_rx_missed_errors: a[7],
        }
    }

    /// `self - base` per field; absent where either is absent. A counter that
    /// went backwards (an interface re-created) reads 0, not a huge number.
    pub fn since(&self, base: &HostCounters) -> HostCounters {
        let (now, then) = (self.to_array(), base.to_array());
        let mut d = [None; Self::FIELDS];
        for i in 0..Self::FIELDS {
            d[i] = match (now[i], then[i]) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            };
        }
        HostCounters::from_array(d)
    }
}

/// The `Udp:` counters of `/proc/net/snmp` (a line of names, then a line of values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpSnmp {
    pub rcvbuf_errors: Option<u64>,
    pub in_errors: Option<u64>,
    pub in_csum_errors: Option<u64>,
    pub no_ports: Option<u64>,
}

/// Parses the `Udp:` header and value lines of `/proc/net/snmp`; counters the
/// text lacks (or that do not parse) are absent.
pub fn parse_snmp_udp(text: &str) -> UdpSnmp {
    let mut lines = text.lines().filter_map(|l| l.strip_prefix("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return UdpSnmp::default();
    };
    let mut u = UdpSnmp::default();
    for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
        let v = value.parse::<u64>().ok();
        match name {
            "RcvbufErrors" => u.rcvbuf_errors = v,
            "InErrors" => u.in_errors = v,
            "InCsumErrors" => u.in_csum_errors = v,
            "NoPorts" => u.no_ports = v,
            _ => {}
        }
    }
    u
}

/// `dropped` and `time_squeeze` of `/proc/net/softnet_stat` summed over CPUs
/// (one line per CPU, hexadecimal columns). Absent when any CPU's line lacks
/// the column, so a partial sum is never reported as the whole.
pub fn parse_softnet(text: &str) -> (Option<u64>, Option<u64>) {
    let mut sums = (Some(0u64), Some(0u64));
    let mut lines = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        lines += 1;
        let mut cols = line.split_whitespace().skip(1);
        let hex = |c: Option<&str>| c.and_then(|c| u64::from_str_radix(c, 16).ok());
        let (dropped, squeeze) = (hex(cols.next()), hex(cols.next()));
        sums.0 = sums.0.zip(dropped).map(|(a, b)| a + b);
        sums.1 = sums.1.zip(squeeze).map(|(a, b)| a + b);
    }
    if lines == 0 {
        return (None, None);
    }
    sums
}

/// Reads the kernel's counters; keeps the readings at start as the baseline.
#[derive(Debug)]
pub struct HostSampler {
    snmp: PathBuf,
    softnet: PathBuf,
    iface: Option<(PathBuf, PathBuf)>,
    base: HostCounters,
    /// Reused for every read: sampling allocates nothing once started.
    text: String,
}

impl HostSampler {
    /// Takes the baseline now (call before traffic is expected).
    pub fn start(interface: Option<&str>) -> Self {
        Self::start_at(PathBuf::from("/proc"), PathBuf::from("/sys"), interface)
    }

    /// As [`HostSampler::start`] with other roots for `/proc` and `/sys` (tests).
    pub fn start_at(proc: PathBuf, sys: PathBuf, interface: Option<&str>) -> Self {
        let iface = interface
            .filter(|i| !i.is_empty() && !i.contains('/') && !i.starts_with('.'))
            .map(|i| {
                let st = sys.join("class/net").join(i).join("statistics");
                (st.join("rx_dropped"), st.join("rx_missed_errors"))
            });
        let mut s = HostSampler {
            snmp: proc.join("net/snmp"),
            softnet: proc.join("net/softnet_stat"),
            iface,
            base: HostCounters::default(),
            text: String::with_capacity(8192),
        };
        s.base = s.read();
        s
    }

    /// The changes since [`HostSampler::start`].
    pub fn sample(&mut self) -> HostCounters {
        self.read().since(&self.base)
    }

    fn read(&mut self) -> HostCounters {
        let mut c = HostCounters::default();
        if read_into(&self.snmp, &mut self.text) {
            c.udp = parse_snmp_udp(&self.text);
        }
        if read_into(&self.softnet, &mut self.text) {
            (c.softnet_dropped, c.softnet_time_squeeze) = parse_softnet(&self.text);
        }
        if let Some((dropped, missed)) = &self.iface {
            c.if_rx_dropped = read_number(dropped, &mut self.text);
            c.if_rx_missed_errors = read_number(missed, &mut self.text);
        }
        c
    }
}

fn read_into(path: &std::path::Path, text: &mut String) -> bool {
    text.clear();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(text))
        .is_ok()
}

fn read_number(path: &std::path::Path, text: &mut String) -> Option<u64> {
    read_into(path, text).then(|| text.trim().parse().ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/net/snmp` as this development machine wrote it (kernel 6.18).
    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 1 64 7736018 0 0 0 0 0 7735984 5675567 38 0 0 0 0 0 0 0 0 5675602
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds InParmProbs InSrcQuenchs InRedirects InEchos InEchoReps InTimestamps InTimestampReps InAddrMasks InAddrMaskReps OutMsgs OutErrors OutRateLimitGlobal OutRateLimitHost OutDestUnreachs OutTimeExcds OutParmProbs OutSrcQuenchs OutRedirects OutEchos OutEchoReps OutTimestamps OutTimestampReps OutAddrMasks OutAddrMaskReps
Icmp: 649 0 0 649 0 0 0 0 0 0 0 0 0 0 649 0 0 0 649 0 0 0 0 0 0 0 0 0 0
IcmpMsg: InType3 OutType3
IcmpMsg: 649 649
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 1079 539 0 0 9 4130082 3620364 0 0 542 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 3605583 649 3818310 2069823 393651 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
";

    /// `/proc/net/softnet_stat` of the same machine (2 CPUs).
    const SOFTNET: &str = "\
0018a58b 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
001c30be 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000
";

    #[test]
    fn snmp_udp_counters_parse_from_real_text() {
        assert_eq!(
            parse_snmp_udp(SNMP),
            UdpSnmp {
                rcvbuf_errors: Some(393_651),
                in_errors: Some(3_818_310),
                in_csum_errors: Some(0),
                no_ports: Some(649),
            }
        );
    }

    #[test]
    fn snmp_edge_cases_leave_values_absent() {
        assert_eq!(parse_snmp_udp(""), UdpSnmp::default());
        // Only UdpLite: never mistaken for Udp.
        let lite = "UdpLite: InErrors RcvbufErrors\nUdpLite: 5 6\n";
        assert_eq!(parse_snmp_udp(lite), UdpSnmp::default());
        // A header without values, an older kernel without InCsumErrors, garbage.
        assert_eq!(parse_snmp_udp("Udp: InErrors\n"), UdpSnmp::default());
        let old = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                   Udp: 1 2 3 4 5\n";
        let u = parse_snmp_udp(old);
        assert_eq!(
            (u.no_ports, u.in_errors, u.rcvbuf_errors, u.in_csum_errors),
            (Some(2), Some(3), Some(5), None)
        );
        let bad = "Udp: InErrors RcvbufErrors\nUdp: x 7\n";
        let u = parse_snmp_udp(bad);
        assert_eq!((u.in_errors, u.rcvbuf_errors), (None, Some(7)));
        // Values cut short: the names without a value are absent.
        let short = "Udp: InErrors RcvbufErrors\nUdp: 9\n";
        let u = parse_snmp_udp(short);
        assert_eq!((u.in_errors, u.rcvbuf_errors), (Some(9), None));
    }

    #[test]
    fn softnet_sums_hex_columns_over_cpus() {
        assert_eq!(parse_softnet(SOFTNET), (Some(0), Some(1)));
        let busy = "00000010 0000000a 000000ff\n00000020 00000001 00000001\n";
        assert_eq!(parse_softnet(busy), (Some(11), Some(256)));
        assert_eq!(parse_softnet(""), (None, None));
        // One CPU's line lacks time_squeeze: that sum is absent, dropped is not.
        let cut = "00000010 0000000a 000000ff\n00000020 00000001\n";
        assert_eq!(parse_softnet(cut), (Some(11), None));
        assert_eq!(parse_softnet("zz qq rr\n"), (None, None));
    }

    #[test]
    fn deltas_are_per_field_and_never_negative() {
        let base = HostCounters {
            udp: UdpSnmp {
                rcvbuf_errors: Some(10),
                ..Default::default()
            },
            softnet_dropped: Some(5),
            if_rx_dropped: Some(100),
            ..Default::default()
        };
        let now = HostCounters {
            udp: UdpSnmp {
                rcvbuf_errors: Some(25),
                in_errors: Some(3), // absent at start: absent
                ..Default::default()
            },
            softnet_dropped: Some(5),
            if_rx_dropped: Some(7), // went backwards
            ..Default::default()
        };
        let d = now.since(&base);
        assert_eq!(d.udp.rcvbuf_errors, Some(15));
        assert_eq!(d.udp.in_errors, None);
        assert_eq!(d.softnet_dropped, Some(0));
        assert_eq!(d.if_rx_dropped, Some(0));
        assert_eq!(HostCounters::from_array(now.to_array()), now);
    }

    #[test]
    fn sampler_reads_files_and_reports_changes_since_start() {
        let root = std::env::temp_dir().join(format!("vs-host-{}", std::process::id()));
        let (proc, sys) = (root.join("proc"), root.join("sys"));
        let stats = sys.join("class/net/vsn0/statistics");
        std::fs::create_dir_all(proc.join("net")).unwrap();
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(proc.join("net/snmp"), SNMP).unwrap();
        std::fs::write(proc.join("net/softnet_stat"), SOFTNET).unwrap();
        std::fs::write(stats.join("rx_dropped"), "40\n").unwrap();
        // rx_missed_errors absent (a veth has none): stays absent.
        let mut s = HostSampler::start_at(proc.clone(), sys.clone(), Some("vsn0"));
        let zero = s.sample();
        assert_eq!(zero.udp.rcvbuf_errors, Some(0));
        assert_eq!(zero.if_rx_dropped, Some(0));
        assert_eq!(zero.if_rx_missed_errors, None);
        std::fs::write(
            proc.join("net/snmp"),
            SNMP.replace(
                "3605583 649 3818310 2069823 393651",
                "3605583 650 3818320 2069823 393658",
            ),
        )
        .unwrap();
        std::fs::write(
            proc.join("net/softnet_stat"),
            SOFTNET.replacen(
                "0018a58b 00000000 00000000",
                "0018a58b 00000004 00000002",
                1,
            ),
        )
        .unwrap();
        std::fs::write(stats.join("rx_dropped"), "43\n").unwrap();
        let d = s.sample();
        assert_eq!(
            d,
            HostCounters {
                udp: UdpSnmp {
                    rcvbuf_errors: Some(7),
                    in_errors: Some(10),
                    in_csum_errors: Some(0),
                    no_ports: Some(1),
                },
                softnet_dropped: Some(4),
                softnet_time_squeeze: Some(2),
                if_rx_dropped: Some(3),
                if_rx_missed_errors: None,
            }
        );
        // Files vanish: values become absent, no error.
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(s.sample(), HostCounters::default());
        // No interface: the interface counters are absent; the real files parse.
        let mut real = HostSampler::start(None);
        let r = real.sample();
        assert!(r.udp.rcvbuf_errors.is_some() && r.softnet_dropped.is_some());
        assert_eq!((r.if_rx_dropped, r.if_rx_missed_errors), (None, None));
    }
}
