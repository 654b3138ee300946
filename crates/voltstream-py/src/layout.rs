//! The `layout=` dict of `Capture()` converted to the core library's declarative
//! [`Layout`] (docs/formats.md, "Declarative layouts"); the core validates it.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::wire::{Endian, Layout, LayoutCheck, LayoutField};

use crate::errors::config_error;

/// Reads one `{offset, bytes, endian='big', shift=0, bits=0}` field of a layout.
pub(crate) fn layout_field(d: &Bound<'_, PyDict>, what: &str) -> PyResult<LayoutField> {
    let get = |k: &str| d.get_item(k);
    let need =
        |k: &str| get(k)?.ok_or_else(|| config_error(format!("layout field '{what}' needs '{k}'")));
    let endian = match get("endian")?
        .map(|v| v.extract::<String>())
        .transpose()?
        .as_deref()
    {
        None | Some("big") => Endian::Big,
        Some("little") => Endian::Little,
        Some(o) => {
            return Err(config_error(format!(
                "layout field '{what}': endian {o:?}; use 'big' or 'little'"
            )))
        }
    };
    let opt_u8 =
        |k: &str| -> PyResult<u8> { Ok(get(k)?.map(|v| v.extract()).transpose()?.unwrap_or(0)) };
    Ok(LayoutField {
        offset: need("offset")?.extract()?,
        bytes: need("bytes")?.extract()?,
        endian,
        shift: opt_u8("shift")?,
        bits: opt_u8("bits")?,
    })
}

/// Builds a declarative [`Layout`] from the `layout=` dict of `Capture()`.
pub(crate) fn layout_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Layout> {
    let need = |k: &str| {
        d.get_item(k)?
            .ok_or_else(|| config_error(format!("format 'layout' needs layout['{k}']")))
    };
    let sub = |k: &str| -> PyResult<Option<Bound<'_, PyDict>>> {
        Ok(d.get_item(k)?
            .map(|v| v.cast_into::<PyDict>())
            .transpose()?)
    };
    let index = sub("index")?.ok_or_else(|| {
        config_error("format 'layout' needs layout['index'] = {offset, bytes}".into())
    })?;
    let mut checks = Vec::new();
    if let Some(list) = d.get_item("checks")? {
        for item in list.try_iter()? {
            let item = item?.cast_into::<PyDict>()?;
            let value = item
                .get_item("value")?
                .ok_or_else(|| config_error("each layout check needs a 'value'".into()))?;
            checks.push(LayoutCheck {
                field: layout_field(&item, "checks")?,
                value: value.extract()?,
                foreign: item
                    .get_item("foreign")?
                    .map(|v| v.extract())
                    .transpose()?
                    .unwrap_or(false),
            });
        }
    }
    Ok(Layout {
        packet_len: need("packet_len")?.extract()?,
        index: layout_field(&index, "index")?,
        index_step: d
            .get_item("index_step")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or(1),
        stream: sub("stream")?
            .map(|f| layout_field(&f, "stream"))
            .transpose()?,
        stream_ids: d
            .get_item("stream_ids")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or_default(),
        checks,
        payload_offset: need("payload_offset")?.extract()?,
        payload_len: need("payload_len")?.extract()?,
    })
}
