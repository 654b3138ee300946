//! Engine settings checked against their bounds, every engine with the same
//! message: what, the bounds, and the value given.

use std::ops::RangeInclusive;

use crate::{Error, Result};

/// `Ok` when `value` lies in `range`; otherwise a configuration error naming
/// `what` (the setting, with why the bounds are what they are when it helps).
pub(crate) fn within(what: &str, value: usize, range: RangeInclusive<usize>) -> Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{what} must be {}..={}, got {value}",
            range.start(),
            range.end()
        )))
    }
}
