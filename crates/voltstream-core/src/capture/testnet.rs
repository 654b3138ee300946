//! Test helpers: private network namespaces, so that tests can make veth
//! pairs and addresses without touching the host's network.

/// Runs `f` on a thread moved into a new network namespace with `lo` up;
/// the namespace (and every link made in it) goes when the thread ends.
pub(crate) fn in_private_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: moves only this thread into a new network namespace.
            let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                r,
                0,
                "unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            ip(&["link", "set", "lo", "up"]);
            f()
        })
        .join()
        .unwrap()
    })
}

/// Runs `ip ARGS` (in the calling thread's network namespace) and checks it.
pub(crate) fn ip(args: &[&str]) {
    let ok = std::process::Command::new("ip")
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    assert!(ok.success(), "ip {args:?} failed");
}
