//! CPU pinning of capture threads.
//!
//! A capture thread pins itself (`sched_setaffinity` on its own thread id)
//! before it allocates or first touches its chunk pool, so the pages land on
//! the memory node of that CPU under Linux's first-touch policy, and the
//! scheduler never moves the hot loop away from its warm caches.

use std::io;

use crate::{Error, Result};

/// The kernel thread id of the calling thread (what `/proc/self/task/<tid>`
/// and `sched_getaffinity(tid)` take).
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// CPUs the thread `tid` may run on (0: the calling thread), in ascending order.
pub fn affinity(tid: i32) -> Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable for its full size, which we pass.
    let r = unsafe { libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return Err(Error::io(
            format!("cannot read the CPU affinity of thread {tid}"),
            io::Error::last_os_error(),
        ));
    }
    let max = 8 * std::mem::size_of_val(&set);
    // SAFETY: CPU_ISSET reads one bit of a valid set; cpu < the set's size.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Checks that `cpu` is one this process may run on, with a message that
/// lists the usable ones.
pub fn check_cpu(cpu: usize) -> Result<()> {
    let allowed = affinity(0)?;
    if allowed.contains(&cpu) {
        return Ok(());
    }
    Err(Error::Config(format!(
        "CPU {cpu} is not available to this process; use one of {} (see `nproc`, \
         `taskset -p $$` or the cgroup's cpuset)",
        ranges(&allowed)
    )))
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    check_cpu(cpu)?;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `set`; cpu is below the set's size (it
    // is in the affinity mask, or check_cpu would have refused it).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: passes a valid set and its size; tid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r != 0 {
        return Err(Error::io(
            format!("cannot pin the capture thread to CPU {cpu}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// "0-3,6" for [0, 1, 2, 3, 6].
fn ranges(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_only_and_bad_cpus_are_refused() {
        let allowed = affinity(0).unwrap();
        let cpu = *allowed.last().unwrap();
        let (tid, seen) = std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            (current_tid(), affinity(0).unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(seen, [cpu]);
        assert_ne!(tid, current_tid());
        let err = pin_current_thread(100_000).unwrap_err().to_string();
        assert!(
            err.contains("CPU 100000") && err.contains(&ranges(&allowed)),
            "{err}"
        );
        assert_eq!(ranges(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }
}
