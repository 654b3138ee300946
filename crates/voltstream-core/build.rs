//! Build script: compiles the XDP program (bpf/voltstream_xdp.c) for the AF_XDP
//! engine and links libbpf, when the machine has what that takes.
//!
//! Needs: a Linux target, `pkg-config` finding libbpf (Debian: libbpf-dev), and
//! clang with the BPF target (Debian: clang; the kernel headers come from
//! linux-libc-dev). With all of them the crate is built with `--cfg
//! voltstream_xdp` and `OUT_DIR/voltstream_xdp.o` is embedded; without them the
//! engine still exists but `XdpEngine::open` explains what to install.
//! `VOLTSTREAM_NO_XDP=1` forces the build without AF_XDP,
//! `VOLTSTREAM_REQUIRE_XDP=1` makes its absence an error; `CLANG` names the
//! compiler to use.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build_dpdk.rs"]
mod build_dpdk;

const SOURCE: &str = "bpf/voltstream_xdp.c";

fn main() {
    build_dpdk::main();
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=VOLTSTREAM_NO_XDP");
    println!("cargo:rerun-if-env-changed=VOLTSTREAM_REQUIRE_XDP");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rustc-check-cfg=cfg(voltstream_xdp)");

    match try_build() {
        Ok(()) => println!("cargo:rustc-cfg=voltstream_xdp"),
        Err(why) if env::var_os("VOLTSTREAM_REQUIRE_XDP").is_some_and(|v| v == "1") => {
            panic!("VOLTSTREAM_REQUIRE_XDP=1 but the AF_XDP engine cannot be built: {why}")
        }
        Err(why) => println!(
            "cargo:warning=voltstream: AF_XDP engine disabled ({why}); install libbpf-dev, \
             clang and pkg-config, then `touch crates/voltstream-core/build.rs` and rebuild"
        ),
    }
}

fn try_build() -> Result<(), String> {
    if env::var_os("VOLTSTREAM_NO_XDP").is_some_and(|v| v != "0" && !v.is_empty()) {
        return Err("VOLTSTREAM_NO_XDP is set".into());
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return Err("not a Linux target".into());
    }
    // Ring offsets above 4 GiB (mmap) and the va_list passing in xdp.rs assume
    // a 64-bit target.
    if env::var("CARGO_CFG_TARGET_POINTER_WIDTH").as_deref() != Ok("64") {
        return Err("not a 64-bit target".into());
    }
    let libs = pkg_config(&["--libs", "libbpf"])?;
    if let Ok(dir) = pkg_config(&["--variable=pcfiledir", "libbpf"]) {
        println!("cargo:rerun-if-changed={dir}/libbpf.pc"); // a libbpf upgrade
    }
    let cflags = pkg_config(&["--cflags", "libbpf"])?;
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?);
    let obj = out.join("voltstream_xdp.o");
    compile_bpf(Path::new(SOURCE), &obj, &cflags)?;
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        }
    }
    Ok(())
}

fn pkg_config(args: &[&str]) -> Result<String, String> {
    let out = Command::new("pkg-config")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run pkg-config: {e}"))?;
    if !out.status.success() {
        return Err("pkg-config does not find libbpf".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn compile_bpf(src: &Path, obj: &Path, cflags: &str) -> Result<(), String> {
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-Wall", "-target", "bpf", "-c"]);
    // The BPF target has no multiarch include directory of its own; the
    // kernel's <asm/...> headers live under the host's (Debian layout).
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = PathBuf::from(format!("/usr/include/{arch}-linux-gnu"));
    if multiarch.is_dir() {
        cmd.arg("-I").arg(&multiarch);
    }
    cmd.args(cflags.split_whitespace().filter(|f| f.starts_with("-I")));
    cmd.arg(src).arg("-o").arg(obj);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {clang}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{clang} cannot compile {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Drop the DWARF but keep .BTF (libbpf needs it); optional.
    let _ = Command::new("llvm-strip").arg("-g").arg(obj).status();
    Ok(())
}
