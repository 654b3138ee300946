//! Classic BPF (linux/filter.h): the opcodes our socket filters and fan-out
//! steering programs are written in, attaching them, and (for tests) an
//! interpreter of the instructions we emit.

use std::io;

use super::host::setsockopt;

pub(crate) const BPF_LD: u16 = 0x00;
pub(crate) const BPF_LDX: u16 = 0x01;
pub(crate) const BPF_ALU: u16 = 0x04;
pub(crate) const BPF_JMP: u16 = 0x05;
pub(crate) const BPF_RET: u16 = 0x06;
pub(crate) const BPF_MISC: u16 = 0x07;
pub(crate) const BPF_W: u16 = 0x00;
pub(crate) const BPF_H: u16 = 0x08;
pub(crate) const BPF_B: u16 = 0x10;
pub(crate) const BPF_ABS: u16 = 0x20;
pub(crate) const BPF_IND: u16 = 0x40;
pub(crate) const BPF_MSH: u16 = 0xa0;
pub(crate) const BPF_AND: u16 = 0x50;
pub(crate) const BPF_LSH: u16 = 0x60;
pub(crate) const BPF_JEQ: u16 = 0x10;
pub(crate) const BPF_JSET: u16 = 0x40;
pub(crate) const BPF_K: u16 = 0x00;
pub(crate) const BPF_TAX: u16 = 0x00;
// Scratch memory and arithmetic: the chunk-steering program computes
// (index / packets_per_chunk) mod threads (capture/steer_chunks.rs).
pub(crate) const BPF_ST: u16 = 0x02;
pub(crate) const BPF_STX: u16 = 0x03;
pub(crate) const BPF_MEM: u16 = 0x60;
pub(crate) const BPF_X: u16 = 0x08;
pub(crate) const BPF_A: u16 = 0x10;
pub(crate) const BPF_ADD: u16 = 0x00;
pub(crate) const BPF_MUL: u16 = 0x20;
pub(crate) const BPF_DIV: u16 = 0x30;
pub(crate) const BPF_OR: u16 = 0x40;
pub(crate) const BPF_RSH: u16 = 0x70;
pub(crate) const BPF_MOD: u16 = 0x90;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the packet type.
pub(crate) const SKF_PKTTYPE: u32 = (-0x1000i32 + 4) as u32;
/// `SKF_NET_OFF`: loads at this offset and above read from the network header.
pub(crate) const SKF_NET_OFF: u32 = (-0x0010_0000i32) as u32;

pub(crate) fn bpf(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Attaches a `ret 0` filter: the socket (a guard that only holds the port)
/// never queues a datagram.
pub(crate) fn attach_drop_all(fd: libc::c_int) -> io::Result<()> {
    attach_filter(fd, &mut [bpf(BPF_RET | BPF_K, 0, 0, 0)])
}

pub(crate) fn attach_filter(fd: libc::c_int, prog: &mut [libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// Runs program `p` on `pkt` as the kernel would: `net` is where the network
/// header starts in `pkt` (for `SKF_NET_OFF` loads), `pkttype` what
/// `SKF_PKTTYPE` loads. A load past the end returns 0 (drop), as in the kernel.
/// Knows the instructions our programs use, and panics on any other.
#[cfg(test)]
pub(crate) fn run(p: &[libc::sock_filter], pkt: &[u8], net: usize, pkttype: u8) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let mut mem = [0u32; 16];
    let load = |k: u32, code: u16| -> Option<u32> {
        let at = if k >= SKF_NET_OFF {
            net + (k - SKF_NET_OFF) as usize
        } else {
            k as usize
        };
        let n = match code & 0x18 {
            BPF_W => 4,
            BPF_H => 2,
            _ => 1,
        };
        let b = pkt.get(at..at + n)?;
        Some(b.iter().fold(0u32, |v, &c| v << 8 | c as u32))
    };
    loop {
        let i = p[pc];
        pc += 1;
        match i.code {
            c if c & 0xe7 == BPF_LD | BPF_ABS && i.k == SKF_PKTTYPE => a = pkttype as u32,
            c if c & 0xe7 == BPF_LD | BPF_ABS => match load(i.k, c) {
                Some(v) => a = v,
                None => return 0,
            },
            c if c & 0xe7 == BPF_LD | BPF_IND => match load(x.wrapping_add(i.k), c) {
                Some(v) => a = v,
                None => return 0,
            },
            c if c == BPF_LDX | BPF_B | BPF_MSH => match pkt.get(i.k as usize) {
                Some(&b) => x = 4 * (b & 0x0f) as u32,
                None => return 0,
            },
            c if c == BPF_ALU | BPF_AND | BPF_K => a &= i.k,
            c if c == BPF_ALU | BPF_LSH | BPF_K => a <<= i.k,
            c if c == BPF_ALU | BPF_RSH | BPF_K => a >>= i.k,
            c if c == BPF_ALU | BPF_MUL | BPF_K => a = a.wrapping_mul(i.k),
            c if c == BPF_ALU | BPF_DIV | BPF_K => a /= i.k, // the kernel refuses k = 0
            c if c == BPF_ALU | BPF_MOD | BPF_K => a %= i.k,
            c if c == BPF_ALU | BPF_ADD | BPF_X => a = a.wrapping_add(x),
            c if c == BPF_ALU | BPF_OR | BPF_X => a |= x,
            c if c == BPF_ST => mem[i.k as usize] = a,
            c if c == BPF_STX => mem[i.k as usize] = x,
            c if c == BPF_LDX | BPF_MEM => x = mem[i.k as usize],
            c if c == BPF_RET | BPF_A => return a,
            c if c == BPF_MISC | BPF_TAX => x = a,
            c if c == BPF_JMP | BPF_JEQ | BPF_K => {
                pc += if a == i.k { i.jt } else { i.jf } as usize
            }
            c if c == BPF_JMP | BPF_JSET | BPF_K => {
                pc += if a & i.k != 0 { i.jt } else { i.jf } as usize
            }
            c if c == BPF_RET | BPF_K => return i.k,
            c => panic!("unexpected instruction {c:#x}"),
        }
    }
}
