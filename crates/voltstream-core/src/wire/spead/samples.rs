//! Packed sample words of MeerKAT digitiser heaps.

use crate::wire::WireError;

/// Bytes that `samples` packed samples of `bits` bits occupy, if whole.
pub fn packed_len(samples: usize, bits: u8) -> Option<usize> {
    let total = samples.checked_mul(bits as usize)?;
    (total % 8 == 0).then_some(total / 8)
}

/// Unpacks signed two's-complement samples of `bits` (2..=16) bits packed as
/// one big-endian bit stream (the first sample in the most significant bits
/// of byte 0), as MeerKAT digitisers send them. Decodes `out.len()` samples;
/// `Truncated` if `packed` is too short, `Malformed` for other widths.
/// Allocation-free.
pub fn unpack_signed(packed: &[u8], bits: u8, out: &mut [i16]) -> Result<(), WireError> {
    if !(2..=16).contains(&bits) {
        return Err(WireError::Malformed);
    }
    let bits = bits as u32;
    let need = out
        .len()
        .checked_mul(bits as usize)
        .ok_or(WireError::Truncated)?
        .div_ceil(8);
    let packed = packed.get(..need).ok_or(WireError::Truncated)?;
    if bits == 8 {
        for (o, &b) in out.iter_mut().zip(packed) {
            *o = b as i8 as i16;
        }
        return Ok(());
    }
    let (mut acc, mut have, mut bytes) = (0u32, 0u32, packed.iter());
    for o in out.iter_mut() {
        while have < bits {
            acc = (acc << 8) | *bytes.next().unwrap_or(&0) as u32;
            have += 8;
        }
        have -= bits;
        let code = (acc >> have) & ((1 << bits) - 1);
        // Sign-extend from `bits` bits.
        *o = ((code << (32 - bits)) as i32 >> (32 - bits)) as i16;
        acc &= (1 << have) - 1;
    }
    Ok(())
}
