//! The live request's own KV reservation, decided once: its title, its figures, how many
//! slots one cell stands for, and which cells hold tokens. The KV pane draws it in
//! terminal cells and `export --pane request` in SVG.

use super::units::bytes;
use crate::kv::KvElem;
use crate::report::KvReport;

/// The picture's title: the reservation's kind and what it stores each number as.
pub fn title(elem: KvElem) -> String {
    format!("KV cache · contiguous · {elem}")
}

/// The reservation as a picture of at most a given number of cells.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestKv {
    /// How full the reservation is, in slots.
    pub slots: String,
    /// What it costs, in bytes.
    pub bytes: String,
    /// Slots one cell stands for (1 when every slot has a cell of its own).
    pub per_cell: usize,
    /// One entry per cell, in slot order: does its first slot hold a token?
    pub filled: Vec<bool>,
}

impl RequestKv {
    /// A reservation drawn in at most `max_cells` cells (a longer reservation gives each
    /// cell several slots). None before the request holds any cache.
    pub fn new(kv: &KvReport, max_cells: usize) -> Option<Self> {
        if kv.capacity == 0 {
            return None;
        }
        let per_cell = kv.capacity.div_ceil(max_cells.max(1)).max(1);
        let cells = kv.capacity.div_ceil(per_cell).min(max_cells.max(1));
        Some(Self {
            slots: format!(
                "utilization {:.1}%: {} of {} slots hold tokens",
                kv.utilization_pct(),
                kv.used,
                kv.capacity
            ),
            bytes: format!(
                "{} used of {} reserved · {} per token",
                // Saturating: a recording's figures are untrusted.
                bytes(kv.used.saturating_mul(kv.bytes_per_token)),
                bytes(kv.reserved_bytes),
                bytes(kv.bytes_per_token)
            ),
            per_cell,
            filled: (0..cells).map(|c| c * per_cell < kv.used).collect(),
        })
    }

    /// What one cell stands for, for the legend.
    pub fn cell_key(&self) -> String {
        match self.per_cell {
            1 => "one cell = one slot".into(),
            n => format!("one cell = {n} slots"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(capacity: usize, used: usize, max_cells: usize) -> Option<RequestKv> {
        let kv = KvReport {
            capacity,
            used,
            bytes_per_token: 100,
            reserved_bytes: capacity * 100,
        };
        RequestKv::new(&kv, max_cells)
    }

    #[test]
    fn a_long_reservation_shares_cells_and_keeps_its_filled_prefix() {
        let v = view(100, 25, 10).unwrap();
        assert_eq!(v.per_cell, 10);
        assert_eq!(v.filled.len(), 10);
        // Cells 0..2 start at slots 0, 10, 20: all below 25 tokens.
        assert_eq!(v.filled.iter().filter(|f| **f).count(), 3);
        assert_eq!(v.cell_key(), "one cell = 10 slots");
        assert!(v.slots.contains("25 of 100 slots"), "{}", v.slots);
    }

    #[test]
    fn no_reservation_no_picture() {
        assert_eq!(view(0, 0, 10), None);
        let one = view(5, 5, 10).unwrap();
        assert_eq!((one.per_cell, one.filled), (1, vec![true; 5]));
    }
}
