//! Build step of the DPDK engine (cargo feature `dpdk`, off by default):
//! compiles dpdk/vs_dpdk_shim.c against the system DPDK found by pkg-config
//! (`libdpdk`; Debian 12: dpdk-dev, DPDK 22.11) into a static library and
//! links DPDK's shared libraries. With the feature on and DPDK missing, the
//! build fails and says what to install; without the feature nothing happens
//! and `DpdkEngine::open` says how to build it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SHIM: &str = "dpdk/vs_dpdk_shim.c";
/// The DPDK libraries the shim calls into; drivers (net_af_packet, PCI NICs)
/// are plugins the EAL loads at start-up from its driver directory.
const LIBS: [&str; 4] = ["rte_ethdev", "rte_mbuf", "rte_mempool", "rte_eal"];

pub fn main() {
    println!("cargo:rerun-if-changed={SHIM}");
    println!("cargo:rerun-if-changed=build_dpdk.rs");
    println!("cargo:rerun-if-env-changed=CC");
    if env::var_os("CARGO_FEATURE_DPDK").is_none() {
        return;
    }
    if let Err(why) = build() {
        panic!(
            "\n\nvoltstream: the `dpdk` feature needs DPDK 22.11 or later: {why}.\n\
             Install it (Debian/Ubuntu: `apt-get install dpdk-dev pkg-config`), or build \
             without `--features dpdk`.\n\n"
        );
    }
}

fn build() -> Result<(), String> {
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return Err("the DPDK engine is built for Linux only".into());
    }
    let version = pkg_config(&["--modversion"])?;
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 22 {
        return Err(format!(
            "pkg-config finds libdpdk {version}, older than 22.11"
        ));
    }
    if let Ok(dir) = pkg_config(&["--variable=pcfiledir"]) {
        println!("cargo:rerun-if-changed={dir}/libdpdk.pc"); // a DPDK upgrade
    }
    let cflags = pkg_config(&["--cflags"])?;
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?);
    let obj = out.join("vs_dpdk_shim.o");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let o = cmd
            .output()
            .map_err(|e| format!("cannot run {what}: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
    };
    run(
        Command::new(&cc)
            .args(["-O2", "-g", "-Wall", "-fPIC", "-c", SHIM, "-o"])
            .arg(&obj)
            .args(cflags.split_whitespace()),
        &format!("{cc} on {SHIM}"),
    )?;
    let lib = out.join("libvs_dpdk_shim.a");
    let _ = std::fs::remove_file(&lib);
    run(
        Command::new("ar").arg("crs").arg(&lib).arg(&obj),
        "ar on the shim",
    )?;
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=vs_dpdk_shim");
    for flag in pkg_config(&["--libs-only-L"])?.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        }
    }
    for l in LIBS {
        println!("cargo:rustc-link-lib={l}");
    }
    Ok(())
}

fn pkg_config(args: &[&str]) -> Result<String, String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("libdpdk")
        .output()
        .map_err(|e| format!("cannot run pkg-config: {e}"))?;
    if !out.status.success() {
        return Err("pkg-config does not find libdpdk".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
