//! The page allocator behind the paged KV cache (PagedAttention's block manager), on
//! plain numbers: pages, a free list, reference counts, block tables, prefix hashes and
//! copy-on-write. The tensors live in [`super::paged`]; this file decides *where* every
//! token's keys and values go.

use std::collections::{HashMap, VecDeque};

/// A sequence's id: whoever asks for pages names each sequence it holds them for (the
/// serving engine names them by its requests' ids).
pub type SeqId = u64;

/// Why the allocator refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("out of KV pages: need {need}, {free} free")]
    OutOfPages { need: usize, free: usize },
    #[error("request {0} has no block table")]
    UnknownRequest(SeqId),
    #[error("request {0} already has a block table")]
    AlreadyAdmitted(SeqId),
    #[error("bad pool settings: {0}")]
    BadSettings(String),
    /// The allocator's state disagrees with itself: a bug in inferlab, said plainly.
    #[error("KV invariant broken: {0}")]
    Broken(String),
}

/// One request's pages, in token order, and its tokens (for prefix hashes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    pub pages: Vec<u32>,
    pub tokens: Vec<u32>,
}

/// Where a planned append goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendPlan {
    /// Physical slot (page × page_size + offset) of each new token.
    pub slots: Vec<u32>,
    /// Pages to copy before writing (copy-on-write of a shared last page): (from, to).
    pub copies: Vec<(u32, u32)>,
}

/// Statistics straight from the allocator.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PoolStats {
    pub total_pages: usize,
    pub free_pages: usize,
    pub used_pages: usize,
    pub shared_pages: usize,
    pub page_size: usize,
    /// Slots of used pages that hold a token.
    pub token_slots: usize,
    /// Empty slots at the end of partly filled pages.
    pub internal_fragmentation: usize,
}

impl PoolStats {
    /// Share of allocated slots holding real tokens, percent.
    pub fn utilization_pct(&self) -> f64 {
        let alloc = self.used_pages * self.page_size;
        if alloc == 0 {
            100.0
        } else {
            100.0 * self.token_slots as f64 / alloc as f64
        }
    }
}

/// H(parent hash, the page's tokens): a full page's identity for prefix sharing.
pub fn page_hash(parent: u64, tokens: &[u32]) -> u64 {
    // FNV-1a: simple, deterministic across runs and machines, recomputable by a test.
    let mut h = 0xcbf29ce484222325u64 ^ parent.wrapping_mul(0x100000001b3);
    for &t in tokens {
        for b in t.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// The shape every page pool and paged store must have: at least one page of at least
/// one token. The allocator and the bytes of a paged store check the same rule.
pub fn check_shape(n_pages: usize, page_size: usize) -> Result<(), KvError> {
    if page_size == 0 {
        return Err(KvError::BadSettings(
            "page size must be at least 1 token".into(),
        ));
    }
    if n_pages == 0 {
        return Err(KvError::BadSettings(
            "the budget is smaller than one page".into(),
        ));
    }
    Ok(())
}

/// The allocator.
#[derive(Debug, Clone)]
pub struct PagePool {
    page_size: usize,
    ref_count: Vec<u32>,
    /// Tokens written into each page.
    fill: Vec<u32>,
    /// Prefix hash of each full page, when it has one.
    hash: Vec<Option<u64>>,
    by_hash: HashMap<u64, u32>,
    /// What each hashed page holds: the page before it in its table and its tokens. A hash
    /// hit is only taken when these match too: 64 bits can collide, and a wrong hit would
    /// hand a request another prompt's K/V.
    content: Vec<Option<(Option<u32>, Vec<u32>)>>,
    /// The prefix hash; a field so a test can substitute one that always collides.
    hasher: fn(u64, &[u32]) -> u64,
    /// Pages no request holds, taken from the front. A freed page goes back to the front:
    /// the next request reuses it while it is still mapped and perhaps cached. Put at the
    /// back, the list walked the whole pool, and each page's first touch cost the kernel a
    /// fault and a zeroing: about 7,500 more faults (30 MB) in one paged run of `bench kv
    /// --kv-tokens 2560`. Small next to a decode step, but for nothing.
    free: VecDeque<u32>,
    tables: HashMap<SeqId, BlockTable>,
    /// Sharing of prompt pages between live requests: full pages by their prefix hash,
    /// and the partly filled page after them when another request's table holds the same
    /// tokens there (the same prompt asked twice).
    pub prefix_sharing: bool,
}

impl PagePool {
    /// A pool of `n_pages` pages of `page_size` tokens.
    pub fn new(n_pages: usize, page_size: usize) -> Result<Self, KvError> {
        check_shape(n_pages, page_size)?;
        Ok(Self {
            page_size,
            ref_count: vec![0; n_pages],
            fill: vec![0; n_pages],
            hash: vec![None; n_pages],
            by_hash: HashMap::new(),
            content: vec![None; n_pages],
            hasher: page_hash,
            free: (0..n_pages as u32).collect(),
            tables: HashMap::new(),
            prefix_sharing: true,
        })
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages in the pool.
    pub fn total_pages(&self) -> usize {
        self.ref_count.len()
    }

    /// Free pages now.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// The block table of `req`.
    pub fn table(&self, req: SeqId) -> Option<&BlockTable> {
        self.tables.get(&req)
    }

    /// The physical slot of every token `req` holds, in order: what attention reads
    /// through its block table.
    pub fn slots(&self, req: SeqId) -> Vec<u32> {
        let ps = self.page_size;
        self.tables.get(&req).map_or_else(Vec::new, |t| {
            (0..t.tokens.len())
                .map(|pos| t.pages[pos / ps] * ps as u32 + (pos % ps) as u32)
                .collect()
        })
    }

    /// Requests holding a table.
    pub fn requests(&self) -> impl Iterator<Item = (&SeqId, &BlockTable)> {
        self.tables.iter()
    }

    /// Reference count of a page.
    pub fn ref_count(&self, page: u32) -> u32 {
        self.ref_count[page as usize]
    }

    /// Tokens held by a page.
    pub fn fill(&self, page: u32) -> u32 {
        self.fill[page as usize]
    }

    /// Prefix hash of a page, if it is full and hashed.
    #[cfg(any(test, feature = "testing"))]
    pub fn hash_of(&self, page: u32) -> Option<u64> {
        self.hash[page as usize]
    }

    /// Pages a fresh request of `tokens` tokens needs (before any prefix sharing).
    pub fn pages_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page_size)
    }

    fn take_page(&mut self) -> u32 {
        let p = self.free.pop_front().expect("checked by the caller");
        debug_assert_eq!(self.ref_count[p as usize], 0);
        self.ref_count[p as usize] = 1;
        self.fill[p as usize] = 0;
        p
    }

    /// Replaces the prefix hash, for tests that need collisions.
    #[cfg(any(test, feature = "testing"))]
    pub fn with_hasher(mut self, hasher: fn(u64, &[u32]) -> u64) -> Self {
        self.hasher = hasher;
        self
    }

    fn forget_hash(&mut self, p: u32) {
        self.content[p as usize] = None;
        if let Some(h) = self.hash[p as usize].take() {
            if self.by_hash.get(&h) == Some(&p) {
                self.by_hash.remove(&h);
            }
        }
    }

    fn release(&mut self, p: u32) {
        let rc = &mut self.ref_count[p as usize];
        assert!(*rc > 0, "ref count of page {p} would go negative");
        *rc -= 1;
        if *rc == 0 {
            self.forget_hash(p);
            self.fill[p as usize] = 0;
            self.free.push_front(p);
        }
    }

    /// Creates `req`'s block table for `prompt`, sharing every full prompt page another
    /// live request already holds. At most `len − 1` tokens are shared: the last prompt
    /// token must still run to produce logits. Returns the number of tokens whose K/V
    /// are already cached.
    pub fn admit(&mut self, req: SeqId, prompt: &[u32]) -> Result<usize, KvError> {
        if self.tables.contains_key(&req) {
            return Err(KvError::AlreadyAdmitted(req));
        }
        let mut table = BlockTable::default();
        if self.prefix_sharing && !prompt.is_empty() {
            let shareable = (prompt.len() - 1) / self.page_size;
            for p in self.full_prefix_pages(prompt) {
                self.ref_count[p as usize] += 1;
                table.pages.push(p);
            }
            table
                .tokens
                .extend_from_slice(&prompt[..table.pages.len() * self.page_size]);
            if table.pages.len() == shareable {
                self.share_partial(&mut table, &prompt[..prompt.len() - 1]);
            }
        }
        let cached = table.tokens.len();
        self.tables.insert(req, table);
        Ok(cached)
    }

    /// The full pages of `prompt` (at most `len − 1` tokens) that live requests already
    /// hold, in order: each found by its hash, H(parent hash, the page's tokens), and
    /// checked token for token against what the page holds.
    fn full_prefix_pages(&self, prompt: &[u32]) -> Vec<u32> {
        let shareable = prompt.len().saturating_sub(1) / self.page_size;
        let (mut pages, mut parent) = (Vec::new(), 0u64);
        for chunk in prompt.chunks_exact(self.page_size).take(shareable) {
            let h = (self.hasher)(parent, chunk);
            let Some(&p) = self.by_hash.get(&h) else {
                break;
            };
            let expected = (pages.last().copied(), chunk.to_vec());
            if self.content[p as usize].as_ref() != Some(&expected) {
                break;
            }
            pages.push(p);
            parent = h;
        }
        pages
    }

    /// Full pages a request with `prompt` would share if admitted now: the pages it will
    /// not take from the free list (none with prefix sharing off).
    pub fn shared_on_admit(&self, prompt: &[u32]) -> usize {
        if self.prefix_sharing {
            self.full_prefix_pages(prompt).len()
        } else {
            0
        }
    }

    /// After the shared full pages, shares the partly filled page that follows when a
    /// live request holds the same pages before it and the same `shareable` tokens in it.
    /// The page stays shared until one of its holders writes into it: that write copies
    /// it first (copy-on-write), since the other holder's slots must not change.
    fn share_partial(&mut self, table: &mut BlockTable, shareable: &[u32]) {
        let (k, ps) = (table.pages.len(), self.page_size);
        let rest = &shareable[k * ps..];
        if rest.is_empty() {
            return;
        }
        // The lowest request id among the candidates, so the choice does not depend on
        // the map's order.
        let found = self
            .tables
            .iter()
            .filter(|(_, t)| {
                t.pages.len() > k
                    && t.pages[..k] == table.pages[..]
                    && t.tokens.get(k * ps..k * ps + rest.len()) == Some(rest)
            })
            .min_by_key(|(id, _)| **id)
            .map(|(_, t)| t.pages[k]);
        if let Some(p) = found {
            self.ref_count[p as usize] += 1;
            table.pages.push(p);
            table.tokens.extend_from_slice(rest);
        }
    }

    /// Pages an append of `n` tokens to `req` would take from the free list.
    pub fn pages_needed(&self, req: SeqId, n: usize) -> Result<usize, KvError> {
        let t = self.tables.get(&req).ok_or(KvError::UnknownRequest(req))?;
        let len = t.tokens.len();
        let have = t.pages.len() * self.page_size;
        let mut need = (len + n).saturating_sub(have).div_ceil(self.page_size);
        // A shared, partly filled last page must be copied before it is written.
        if n > 0 && len % self.page_size != 0 {
            if let Some(&last) = t.pages.last() {
                if self.ref_count[last as usize] > 1 {
                    need += 1;
                }
            }
        }
        Ok(need)
    }

    /// Plans the append of `tokens` to `req`: allocates pages (all or nothing), copies a
    /// shared last page first, and hashes every page this append fills.
    pub fn append(&mut self, req: SeqId, tokens: &[u32]) -> Result<AppendPlan, KvError> {
        let need = self.pages_needed(req, tokens.len())?;
        if need > self.free.len() {
            return Err(KvError::OutOfPages {
                need,
                free: self.free.len(),
            });
        }
        let ps = self.page_size;
        let mut plan = AppendPlan::default();
        let mut table = self.tables.remove(&req).expect("checked in pages_needed");
        let len = table.tokens.len();
        if !tokens.is_empty() && !len.is_multiple_of(ps) {
            let last = *table.pages.last().expect("a partial page exists");
            if self.ref_count[last as usize] > 1 {
                let copy = self.take_page();
                // The copy holds this request's tokens; the other holder may have
                // written more into the original since they shared it.
                self.fill[copy as usize] = (len % ps) as u32;
                self.release(last);
                *table.pages.last_mut().expect("non-empty") = copy;
                plan.copies.push((last, copy));
            }
        }
        for (i, &tok) in tokens.iter().enumerate() {
            let pos = len + i;
            if pos / ps >= table.pages.len() {
                let p = self.take_page();
                table.pages.push(p);
            }
            let page = table.pages[pos / ps];
            plan.slots.push(page * ps as u32 + (pos % ps) as u32);
            self.fill[page as usize] = (pos % ps + 1) as u32;
            // Writing into a page that was full for a holder now gone (after a truncate)
            // makes it partial again: its old prefix hash no longer describes it.
            if pos % ps != ps - 1 {
                self.forget_hash(page);
            }
            table.tokens.push(tok);
            if pos % ps == ps - 1 {
                let start = pos + 1 - ps;
                let parent = if start == 0 {
                    0
                } else {
                    self.hash[table.pages[start / ps - 1] as usize].unwrap_or(0)
                };
                let h = (self.hasher)(parent, &table.tokens[start..=pos]);
                self.hash[page as usize] = Some(h);
                let before = (start > 0).then(|| table.pages[start / ps - 1]);
                self.content[page as usize] = Some((before, table.tokens[start..=pos].to_vec()));
                self.by_hash.entry(h).or_insert(page);
            }
        }
        self.tables.insert(req, table);
        Ok(plan)
    }

    /// Gives `child` the same pages as `parent` (a shared prefix, e.g. parallel samples).
    #[cfg(any(test, feature = "testing"))]
    pub fn fork(&mut self, parent: SeqId, child: SeqId) -> Result<(), KvError> {
        if self.tables.contains_key(&child) {
            return Err(KvError::AlreadyAdmitted(child));
        }
        let t = self
            .tables
            .get(&parent)
            .ok_or(KvError::UnknownRequest(parent))?
            .clone();
        for &p in &t.pages {
            self.ref_count[p as usize] += 1;
        }
        self.tables.insert(child, t);
        Ok(())
    }

    /// Drops the last `n` tokens of `req`: pages left empty go back to the pool, and a
    /// partly emptied page it alone holds loses its prefix hash (it is no longer full).
    /// A page others share keeps its contents; the next append to it copies it first.
    pub fn truncate(&mut self, req: SeqId, n: usize) -> Result<(), KvError> {
        let mut t = self
            .tables
            .remove(&req)
            .ok_or(KvError::UnknownRequest(req))?;
        let len = t.tokens.len() - n.min(t.tokens.len());
        t.tokens.truncate(len);
        let keep = len.div_ceil(self.page_size);
        self.release_all(t.pages.split_off(keep));
        if let Some(&last) = t.pages.last() {
            let rest = len % self.page_size;
            if rest != 0 && self.ref_count[last as usize] == 1 {
                self.fill[last as usize] = rest as u32;
                self.forget_hash(last);
            }
        }
        self.tables.insert(req, t);
        Ok(())
    }

    /// Frees every page reference of `req`. Freeing twice is an error.
    pub fn free(&mut self, req: SeqId) -> Result<(), KvError> {
        let t = self
            .tables
            .remove(&req)
            .ok_or(KvError::UnknownRequest(req))?;
        self.release_all(t.pages);
        Ok(())
    }

    /// Releases a table's `pages`, last first: each freed one goes to the front of the
    /// free list, so they come back out in table order.
    fn release_all(&mut self, pages: Vec<u32>) {
        for p in pages.into_iter().rev() {
            self.release(p);
        }
    }

    /// Statistics of the pool now.
    pub fn stats(&self) -> PoolStats {
        let used: Vec<usize> = (0..self.total_pages())
            .filter(|&p| self.ref_count[p] > 0)
            .collect();
        let token_slots: usize = used.iter().map(|&p| self.fill[p] as usize).sum();
        PoolStats {
            total_pages: self.total_pages(),
            free_pages: self.free.len(),
            used_pages: used.len(),
            shared_pages: used.iter().filter(|&&p| self.ref_count[p] > 1).count(),
            page_size: self.page_size,
            token_slots,
            internal_fragmentation: used.len() * self.page_size - token_slots,
        }
    }

    /// Checks the allocator's invariants, returning the first one broken.
    #[cfg(any(test, feature = "testing"))]
    pub fn check(&self) -> Result<(), KvError> {
        let n = self.total_pages();
        let mut holders = vec![0u32; n];
        for t in self.tables.values() {
            for &p in &t.pages {
                holders[p as usize] += 1;
            }
            if t.pages.len() != t.tokens.len().div_ceil(self.page_size) {
                return Err(KvError::Broken(format!(
                    "table has {} pages for {} tokens",
                    t.pages.len(),
                    t.tokens.len()
                )));
            }
        }
        let mut on_free = vec![false; n];
        for &p in &self.free {
            if on_free[p as usize] {
                return Err(KvError::Broken(format!(
                    "page {p} is on the free list twice"
                )));
            }
            on_free[p as usize] = true;
        }
        for p in 0..n {
            if holders[p] != self.ref_count[p] {
                return Err(KvError::Broken(format!(
                    "page {p}: ref count {} but {} tables hold it",
                    self.ref_count[p], holders[p]
                )));
            }
            if on_free[p] != (self.ref_count[p] == 0) {
                return Err(KvError::Broken(format!(
                    "page {p}: on free list = {}, ref count {}",
                    on_free[p], self.ref_count[p]
                )));
            }
            if self.hash[p].is_some() && self.fill[p] as usize != self.page_size {
                return Err(KvError::Broken(format!(
                    "page {p} carries a hash but is not full"
                )));
            }
        }
        let s = self.stats();
        if s.free_pages + s.used_pages != s.total_pages {
            return Err(KvError::Broken("free + used != total".into()));
        }
        Ok(())
    }
}
