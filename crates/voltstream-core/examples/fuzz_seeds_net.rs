//! Writes the seed inputs of the `net` cargo-fuzz target into `<dir>/net/`:
//! frames that reach each branch of `wire::net::classify` (VLAN tags, IPv4
//! options, IPv6 extension headers, fragments), so a short run starts past the
//! Ethernet check. Kept apart from `fuzz_seeds` (the payload formats' seeds);
//! regenerate with:
//!
//! ```text
//! cargo run -q -p voltstream-core --example fuzz_seeds_net -- fuzz/seeds
//! ```
use std::net::SocketAddr;
use std::path::Path;

use voltstream_core::wire::net::build::udp_frame;

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/seeds".into());
    let dir = Path::new(&dir).join("net");
    std::fs::create_dir_all(&dir).expect("seed directory");
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).expect("seed");
    let v4: (SocketAddr, SocketAddr) = (
        "10.0.0.2:1234".parse().unwrap(),
        "10.0.0.1:7148".parse().unwrap(),
    );
    let v6: (SocketAddr, SocketAddr) = (
        "[fd00::2]:1234".parse().unwrap(),
        "[ff15::7]:7148".parse().unwrap(),
    );
    let payload: Vec<u8> = (0..64u8).collect();
    for tags in 0..=2 {
        write(
            &format!("ipv4_tags{tags}"),
            &udp_frame(v4.0, v4.1, tags, &payload),
        );
        write(
            &format!("ipv6_tags{tags}"),
            &udp_frame(v6.0, v6.1, tags, &payload),
        );
    }
    // IPv4 with 8 bytes of options (IHL 7).
    let mut f = udp_frame(v4.0, v4.1, 0, &payload);
    f.splice(34..34, [1, 1, 1, 0, 1, 1, 1, 0]);
    f[14] = 0x47;
    let total = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    write("ipv4_options", &f);
    // IPv4 first fragment (MF).
    let mut f = udp_frame(v4.0, v4.1, 0, &payload);
    f[20] |= 0x20;
    write("ipv4_first_fragment", &f);
    // IPv6 with hop-by-hop options, then a fragment header, before UDP.
    let f = udp_frame(v6.0, v6.1, 0, &payload);
    let mut g = f[..54].to_vec();
    g.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop, next: fragment
    g.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]); // fragment (M), next: UDP
    g.extend_from_slice(&f[54..]);
    g[20] = 0;
    let plen = (g.len() - 54) as u16;
    g[18..20].copy_from_slice(&plen.to_be_bytes());
    write("ipv6_hop_fragment", &g);
}
