//! The serving engine's KV memory as cells, decided once: one cell per page (paged) or per
//! page-sized run of a reservation (contiguous), each with its owner, the slots holding
//! tokens and how many requests share it. The serving pane and the exported grid draw it.

use crate::report::ServeReport;
use crate::serve::snapshot::ServeStep;
use crate::serve::CacheKind;

/// One cell of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// The request holding it (the first, when shared); `None` is free memory.
    pub owner: Option<u64>,
    /// Slots holding tokens, out of the page size.
    pub fill: usize,
    /// Requests holding it (more than one: a prefix-shared page).
    pub shared: usize,
    /// Contiguous: free, but in a gap too short for the request waiting at the head of
    /// the queue (external fragmentation).
    pub stranded: bool,
}

/// The grid of one serving iteration.
pub struct Grid {
    pub cache: CacheKind,
    pub page_size: usize,
    pub cells: Vec<Cell>,
}

impl Grid {
    /// The cells of `sv`'s KV memory.
    pub fn of(sv: &ServeReport) -> Self {
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
                    stranded: false,
                })
                .collect(),
            CacheKind::Contiguous => contiguous_cells(s, ps),
        };
        Self {
            cache: sv.cache,
            page_size: ps,
            cells,
        }
    }

    /// A cell as one terminal character; a shared page shows how many requests hold it.
    pub fn glyph(&self, c: &Cell) -> char {
        match (self.cache, c.owner) {
            (_, None) if c.stranded => '×',
            (_, None) => '·',
            (CacheKind::Paged, Some(_)) if c.shared > 9 => '+',
            (CacheKind::Paged, Some(_)) if c.shared > 1 => {
                char::from_digit(c.shared as u32, 10).unwrap_or('+')
            }
            (CacheKind::Paged, Some(_)) if c.fill >= self.page_size => '█',
            (CacheKind::Paged, Some(_)) => '▄',
            (CacheKind::Contiguous, Some(_)) if c.fill > 0 => '█',
            (CacheKind::Contiguous, Some(_)) => '░',
        }
    }

    /// A cell's owner under its wide form, for a grid with rows to spare: `r3`, or `r3+`
    /// for a page r3 shares with others; empty for free memory.
    pub fn owner_label(&self, c: &Cell) -> String {
        match c.owner {
            Some(o) if c.shared > 1 => format!("r{o}+"),
            Some(o) => format!("r{o}"),
            None => String::new(),
        }
    }

    /// A cell in four characters, for a grid with room: the fill glyph, then the slots
    /// holding tokens (`▄14`) or, for a shared page, how many hold it (`█×6`).
    pub fn wide(&self, c: &Cell) -> String {
        if c.owner.is_none() {
            return if c.stranded { "×" } else { "·" }.into();
        }
        let g = if c.fill >= self.page_size {
            '█'
        } else {
            '▄'
        };
        match (self.cache, c.shared) {
            (CacheKind::Paged, n) if n > 1 => format!("{g}×{n}"),
            (CacheKind::Contiguous, _) if c.fill == 0 => "░".into(),
            _ => format!("{g}{}", c.fill),
        }
    }

    /// The wide cells' meanings.
    pub fn wide_legend(&self) -> String {
        let ps = self.page_size;
        match self.cache {
            CacheKind::Paged => format!(
                "one cell per page of {ps} slots: █{ps} full  ▄9 nine slots hold tokens  █×6 shared by six requests  · free"
            ),
            CacheKind::Contiguous => format!(
                "one cell per {ps} slots, in address order:  █{ps} hold tokens  ▄9 nine do  ░ reserved, unused  · free  × a gap too short for the next request"
            ),
        }
    }

    /// The glyphs' meanings, for a one-line legend.
    pub fn legend(&self) -> &'static str {
        match self.cache {
            CacheKind::Paged => "█ full page  ▄ partly filled  2-9 shared by that many  · free",
            CacheKind::Contiguous => {
                "█ holds tokens  ░ reserved, unused  · free  × a gap too short for the next request"
            }
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

/// One logical block of a request: the physical page holding it, how many of its slots
/// hold tokens, and how many requests share that page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub logical: usize,
    pub page: u32,
    pub fill: u32,
    pub refs: usize,
}

/// Request `req`'s block table in a paged serving view (empty for the contiguous cache,
/// or a request that holds no pages).
pub fn block_table(sv: &ServeReport, req: u64) -> Vec<Block> {
    let Some((_, pages)) = sv.step.block_tables.iter().find(|(id, _)| *id == req) else {
        return Vec::new();
    };
    pages
        .iter()
        .enumerate()
        .filter_map(|(logical, &page)| {
            let p = sv.step.pages.get(page as usize)?;
            Some(Block {
                logical,
                page,
                fill: p.fill,
                refs: p.owners.len(),
            })
        })
        .collect()
}

/// "block table r3 · 3 block(s), last 9/16: 0→p12 (shared ×2) · 1→p13 · 2→p40 9/16", for
/// a line of text. The last page's fill comes early too: a narrow pane cuts the end.
pub fn describe_table(req: u64, blocks: &[Block], page_size: usize) -> String {
    let parts: Vec<String> = blocks
        .iter()
        .map(|b| {
            let mut s = format!("{}→p{}", b.logical, b.page);
            if (b.fill as usize) < page_size {
                s.push_str(&format!(" {}/{page_size}", b.fill));
            }
            if b.refs > 1 {
                s.push_str(&format!(" (shared ×{})", b.refs));
            }
            s
        })
        .collect();
    let last = blocks
        .last()
        .map_or(String::new(), |b| format!(", last {}/{page_size}", b.fill));
    format!(
        "block table r{req} · {} block(s){last}: {}",
        blocks.len(),
        parts.join(" · ")
    )
}

/// A contiguous cache's cells in address order: each reservation, then the gap after it.
/// A gap shorter than what the queue's head needs is marked stranded. Recordings made
/// before gaps were reported show the free memory after the reservations.
fn contiguous_cells(s: &ServeStep, ps: usize) -> Vec<Cell> {
    let need = s.memory.head_need;
    let free = |len: usize, stranded: bool| {
        std::iter::repeat_n(
            Cell {
                owner: None,
                fill: 0,
                shared: 0,
                stranded,
            },
            len.div_ceil(ps),
        )
    };
    let gap = |len: usize| free(len, need > 0 && len < need);
    let run = |&(id, reserved, used): &(u64, usize, usize)| {
        (0..reserved.div_ceil(ps)).map(move |c| Cell {
            owner: Some(id),
            fill: used.saturating_sub(c * ps).min(ps),
            shared: 1,
            stranded: false,
        })
    };
    let mut cells: Vec<Cell> = Vec::new();
    if s.gaps.is_empty() {
        cells.extend(s.reservations.iter().flat_map(run));
        let m = &s.memory;
        let rest = m.capacity_tokens.saturating_sub(m.allocated_slots) / ps;
        cells.extend(free(rest * ps, false));
        return cells;
    }
    let mut gaps = s.gaps.iter().peekable();
    let mut at = 0;
    for r in &s.reservations {
        while let Some(&&(start, len)) = gaps.peek() {
            if start > at {
                break;
            }
            cells.extend(gap(len));
            at = start + len;
            gaps.next();
        }
        cells.extend(run(r));
        at += r.1;
    }
    for &(_, len) in gaps {
        cells.extend(gap(len));
    }
    cells
}

/// A contiguous cache's free gaps in words, with external fragmentation named when the
/// queue's head waits although enough slots are free in all; `None` for pages.
pub fn describe_gaps(sv: &ServeReport) -> Option<String> {
    let s = &sv.step;
    if sv.cache != CacheKind::Contiguous || s.gaps.is_empty() && s.memory.head_need == 0 {
        return None;
    }
    let m = &s.memory;
    let free: usize = s.gaps.iter().map(|g| g.1).sum();
    let sizes: Vec<String> = s.gaps.iter().map(|g| g.1.to_string()).collect();
    let mut line = format!(
        "free gaps (slots): {}",
        if sizes.is_empty() {
            "none".into()
        } else {
            sizes.join(", ")
        }
    );
    if m.head_need > 0 && free >= m.head_need && m.largest_gap < m.head_need {
        line.push_str(&format!(
            " · the next request needs {} in one run: {free} free in all, but no gap is that long (external fragmentation)",
            m.head_need
        ));
    } else if m.head_need > 0 {
        line.push_str(&format!(" · the next request needs {}", m.head_need));
    }
    Some(line)
}

/// This iteration's copies on write in words; after one, how many so far and the last;
/// `None` before the first.
pub fn describe_copies(sv: &ServeReport) -> Option<String> {
    let c = &sv.step.copies;
    if c.is_empty() {
        let (it, id, from, to) = sv.last_copy?;
        return Some(format!(
            "copy-on-write so far: {} page(s) · the last: r{id} page {from} → {to} at iteration {it}",
            sv.copies_total
        ));
    }
    let each: Vec<String> = c
        .iter()
        .map(|&(id, from, to)| format!("r{id} page {from} → {to}"))
        .collect();
    // Short enough for 80 columns: the copies first, then why.
    Some(format!(
        "copy-on-write now: {} (shared, so copied before the write)",
        each.join(", ")
    ))
}
