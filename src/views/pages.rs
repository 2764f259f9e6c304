//! The serving engine's KV memory as cells, decided once: one cell per page (paged) or per
//! page-sized run of a reservation (contiguous), each with its owner, the slots holding
//! tokens and how many requests share it. The serving pane and the exported grid draw it.

use crate::serve::CacheKind;
use crate::worker::report::ServeView;

/// One cell of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// The request holding it (the first, when shared); `None` is free memory.
    pub owner: Option<u64>,
    /// Slots holding tokens, out of the page size.
    pub fill: usize,
    /// Requests holding it (more than one: a prefix-shared page).
    pub shared: usize,
}

/// The grid of one serving iteration.
pub struct Grid {
    pub cache: CacheKind,
    pub page_size: usize,
    pub cells: Vec<Cell>,
}

impl Grid {
    /// The cells of `sv`'s KV memory.
    pub fn of(sv: &ServeView) -> Self {
        let s = &sv.step;
        let ps = sv.page_size.max(1);
        let cells = match sv.cache {
            CacheKind::Paged => s
                .pages
                .iter()
                .map(|p| Cell {
                    owner: p.owners.first().copied(),
                    fill: p.fill as usize,
                    shared: p.owners.len(),
                })
                .collect(),
            CacheKind::Contiguous => {
                let mut v: Vec<Cell> = s
                    .reservations
                    .iter()
                    .flat_map(|&(id, reserved, used)| {
                        (0..reserved.div_ceil(ps)).map(move |c| Cell {
                            owner: Some(id),
                            fill: used.saturating_sub(c * ps).min(ps),
                            shared: 1,
                        })
                    })
                    .collect();
                let m = &s.memory;
                let free = m.capacity_tokens.saturating_sub(m.allocated_slots) / ps;
                v.extend(std::iter::repeat_n(
                    Cell {
                        owner: None,
                        fill: 0,
                        shared: 0,
                    },
                    free,
                ));
                v
            }
        };
        Self {
            cache: sv.cache,
            page_size: ps,
            cells,
        }
    }

    /// A cell as one terminal character.
    pub fn glyph(&self, c: &Cell) -> char {
        match (self.cache, c.owner) {
            (_, None) => '·',
            (CacheKind::Paged, Some(_)) if c.shared > 1 => '▒',
            (CacheKind::Paged, Some(_)) if c.fill >= self.page_size => '█',
            (CacheKind::Paged, Some(_)) => '▄',
            (CacheKind::Contiguous, Some(_)) if c.fill > 0 => '█',
            (CacheKind::Contiguous, Some(_)) => '░',
        }
    }

    /// The glyphs' meanings, for a one-line legend.
    pub fn legend(&self) -> &'static str {
        match self.cache {
            CacheKind::Paged => "█ full page  ▄ partly filled  ▒ shared  · free",
            CacheKind::Contiguous => "█ holds tokens  ░ reserved, unused  · free",
        }
    }

    /// The requests that own cells, in id order.
    pub fn owners(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.cells.iter().filter_map(|c| c.owner).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}
