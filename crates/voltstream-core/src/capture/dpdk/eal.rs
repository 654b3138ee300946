//! The EAL's arguments: where its memory comes from and which CPUs it names.

use super::{DpdkConfig, DpdkPort};

/// Whether the kernel has huge pages of the default size free, and where
/// hugetlbfs is mounted (the EAL needs both).
pub(super) fn huge_pages_free() -> bool {
    let free = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    let mounted = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        })
        .unwrap_or(false);
    free > 0 && mounted
}

/// `--lcores` value putting lcore 0 on every CPU this process may run on, so
/// the EAL's pinning of the calling thread changes nothing.
pub(super) fn lcore_all_cpus() -> String {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size passed.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    let cpus: Vec<String> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| ok && unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|c| c.to_string())
        .collect();
    if cpus.is_empty() {
        "0@(0)".into()
    } else {
        format!("0@({})", cpus.join(","))
    }
}

/// The EAL arguments for the first capture of the process (argv[0] included).
pub(super) fn eal_args(config: &DpdkConfig, huge: bool, pool_bytes: usize) -> Vec<String> {
    let mut a: Vec<String> = vec!["voltstream".into(), "--no-telemetry".into()];
    // No files in /var/run/dpdk, so processes never collide: --in-memory with
    // huge pages; --no-huge implies legacy memory, which refuses --in-memory.
    if huge {
        a.push("--in-memory".into());
    } else {
        a.push("--no-shconf".into());
        a.push(format!("--file-prefix=vs{}", std::process::id()));
    }
    a.push(format!("--lcores={}", lcore_all_cpus()));
    a.push("--log-level=*:warning".into());
    match &config.port {
        Some(p @ DpdkPort::Device(d)) if p.is_pci() => a.extend(["-a".into(), d.clone()]),
        _ => a.push("--no-pci".into()),
    }
    if !huge {
        // Without huge pages the EAL's memory is fixed at start-up (mapped lazily).
        let mb = ((pool_bytes * 2) >> 20).max(512);
        a.extend(["--no-huge".into(), "-m".into(), mb.to_string()]);
    }
    a.extend(config.eal_args.iter().cloned());
    a
}
