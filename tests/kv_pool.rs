//! The page allocator's invariants under random sequences of admit / append / fork /
//! truncate / free,
//! and the paged cache's equality with the contiguous one on a real forward pass.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use inferlab::kv::pool::{page_hash, KvError, PagePool};
use inferlab::kv::{KvElem, PagedKv};
use inferlab::model::{Logits, Model};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Admit(u8, Vec<u32>),
    Append(u8, Vec<u32>),
    Fork(u8, u8),
    Truncate(u8, u8),
    Free(u8),
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct tokens so prompts share prefixes often.
    let toks = prop::collection::vec(0u32..3, 0..40);
    prop_oneof![
        (0u8..8, toks.clone()).prop_map(|(r, t)| Op::Admit(r, t)),
        (0u8..8, prop::collection::vec(0u32..3, 1..6)).prop_map(|(r, t)| Op::Append(r, t)),
        (0u8..8, 0u8..8).prop_map(|(a, b)| Op::Fork(a, b)),
        (0u8..8, 0u8..10).prop_map(|(r, n)| Op::Truncate(r, n)),
        (0u8..8).prop_map(Op::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn allocator_invariants_hold_at_every_step(ops in prop::collection::vec(op(), 1..60), ps in 1usize..6) {
        let mut pool = PagePool::new(24, ps).unwrap();
        let mut live = std::collections::HashSet::new();
        for o in ops {
            match o {
                Op::Admit(r, toks) => {
                    if pool.admit(r as u64, &toks).is_ok() {
                        live.insert(r);
                        let cached = pool.table(r as u64).unwrap().tokens.len();
                        prop_assert!(toks.is_empty() || cached < toks.len(), "a prefix hit leaves a token to run");
                        let rest = toks[cached..].to_vec();
                        if pool.append(r as u64, &rest).is_err() {
                            pool.free(r as u64).unwrap();
                            live.remove(&r);
                        }
                    }
                }
                Op::Append(r, toks) => {
                    let before = pool.stats();
                    if let Err(KvError::OutOfPages { .. }) = pool.append(r as u64, &toks) {
                        prop_assert_eq!(pool.stats(), before, "a refused append changes nothing");
                    }
                }
                Op::Fork(a, b) => {
                    if pool.fork(a as u64, b as u64).is_ok() {
                        live.insert(b);
                    }
                }
                Op::Truncate(r, n) => {
                    let before = pool.table(r as u64).map(|t| t.tokens.clone());
                    prop_assert_eq!(pool.truncate(r as u64, n as usize).is_ok(), before.is_some());
                    if let Some(b) = before {
                        let after = &pool.table(r as u64).unwrap().tokens;
                        prop_assert_eq!(&after[..], &b[..b.len() - (n as usize).min(b.len())]);
                    }
                }
                Op::Free(r) => {
                    let was = live.remove(&r);
                    prop_assert_eq!(pool.free(r as u64).is_ok(), was, "double free is an error");
                }
            }
            if let Err(e) = pool.check() {
                return Err(TestCaseError::fail(e.to_string()));
            }
            // Every full, hashed page's hash is H(parent, tokens), recomputed here. (After a
            // truncate a request may see only part of a page others share full.)
            for (_, t) in pool.requests() {
                let mut parent = 0;
                for (i, &p) in t.pages.iter().enumerate() {
                    if (i + 1) * ps > t.tokens.len() {
                        break;
                    }
                    if let Some(h) = pool.hash_of(p) {
                        prop_assert_eq!(h, page_hash(parent, &t.tokens[i * ps..(i + 1) * ps]));
                        parent = h;
                    } else {
                        break;
                    }
                }
            }
        }
        for r in live {
            pool.free(r as u64).unwrap();
        }
        prop_assert_eq!(pool.free_pages(), 24, "every page returns");
        prop_assert!(pool.check().is_ok());
    }
}

#[test]
fn a_hash_collision_does_not_share_another_prompts_page() {
    // Every page hashes alike: only the stored tokens can tell pages apart.
    let mut pool = PagePool::new(10, 4).unwrap().with_hasher(|_, _| 42);
    let a: Vec<u32> = (0..9).collect();
    let b: Vec<u32> = (100..109).collect();
    pool.admit(1, &a).unwrap();
    pool.append(1, &a).unwrap();
    assert_eq!(
        pool.admit(2, &b).unwrap(),
        0,
        "different tokens, same hash: no hit"
    );
    // The same tokens still share, through the same check: the first page only, since
    // the index keeps one page per hash and the second page's hash already names the first.
    assert_eq!(pool.admit(3, &a).unwrap(), 4);
    // Same second page after a different first page: the chain must match too.
    let mut c = b[..4].to_vec();
    c.extend_from_slice(&a[4..]);
    assert_eq!(pool.admit(4, &c).unwrap(), 0);
    pool.check().unwrap();
}

#[test]
fn shared_prefix_and_copy_on_write() {
    let mut pool = PagePool::new(10, 4).unwrap();
    let prompt: Vec<u32> = (0..10).collect();
    assert_eq!(pool.admit(1, &prompt).unwrap(), 0);
    pool.append(1, &prompt).unwrap();
    // Same prompt: the two full pages are shared, and the partly filled third page for
    // its first token; the last token must still run to give logits.
    assert_eq!(pool.admit(2, &prompt).unwrap(), 9);
    let t1 = pool.table(1).unwrap().pages.clone();
    let t2 = pool.table(2).unwrap().pages.clone();
    assert_eq!(t1, t2);
    assert_eq!(pool.ref_count(t1[0]), 2);
    assert_eq!(pool.stats().shared_pages, 3);
    // Writing the last prompt token into the shared third page copies it first; the log
    // says so once, and the first request's page keeps both its tokens.
    let plan = pool.append(2, &prompt[9..]).unwrap();
    assert_eq!(plan.copies, vec![(t1[2], plan.copies[0].1)]);
    assert_eq!((pool.fill(t1[2]), pool.ref_count(t1[2])), (2, 1));
    assert_eq!(pool.fill(plan.copies[0].1), 2);
    pool.check().unwrap();
    // A prompt of exactly two pages shares at most len - 1 tokens: the first page, and
    // three tokens of the second (which the first request filled).
    assert_eq!(pool.admit(3, &prompt[..8]).unwrap(), 7);
    // Fork, then append to the child: its shared partial page is copied first.
    pool.fork(1, 4).unwrap();
    let last = *pool.table(1).unwrap().pages.last().unwrap();
    assert_eq!(pool.ref_count(last), 2);
    let plan = pool.append(4, &[99]).unwrap();
    assert_eq!(plan.copies.len(), 1);
    assert_eq!(plan.copies[0].0, last);
    assert_eq!(pool.ref_count(last), 1);
    assert_ne!(*pool.table(4).unwrap().pages.last().unwrap(), last);
    pool.check().unwrap();
    assert_eq!(pool.free(4), Ok(()));
    assert_eq!(pool.free(4), Err(KvError::UnknownRequest(4)));
}

/// A freed page is the next one handed out: reused while it is still mapped and cached,
/// where a FIFO list would walk on into pages the pool never touched.
#[test]
fn the_most_recently_freed_page_is_reused_first() {
    let mut pool = PagePool::new(8, 4).unwrap();
    pool.prefix_sharing = false;
    for (req, first) in [(1, 0u32), (2, 100)] {
        let prompt: Vec<u32> = (first..first + 8).collect();
        pool.admit(req, &prompt).unwrap();
        pool.append(req, &prompt).unwrap();
    }
    let freed = pool.table(1).unwrap().pages.clone();
    pool.free(1).unwrap();
    let prompt: Vec<u32> = (200..208).collect();
    pool.admit(3, &prompt).unwrap();
    pool.append(3, &prompt).unwrap();
    // Back in the order request 1 held them.
    assert_eq!(
        pool.table(3).unwrap().pages,
        freed,
        "request 3 should take request 1's pages"
    );
    pool.check().unwrap();
}

#[test]
fn bad_settings_are_refused() {
    assert!(matches!(PagePool::new(10, 0), Err(KvError::BadSettings(_))));
    assert!(matches!(PagePool::new(0, 16), Err(KvError::BadSettings(_))));
}

/// What the scheduler and the runner do for one request between them: the allocator
/// appends its tokens (pages, and a copy of a shared last page), the store copies the
/// pages it was told to and lends the batch view the pass writes through.
fn append<'a>(
    kv: &'a mut PagedKv,
    pool: &mut PagePool,
    req: u64,
    tokens: &[u32],
) -> inferlab::kv::paged::PagedBatch<'a> {
    let before = pool.table(req).map_or(0, |t| t.tokens.len());
    let plan = pool.append(req, tokens).unwrap();
    kv.copy_pages(&plan.copies).unwrap();
    let all = pool.slots(req);
    kv.batch(vec![inferlab::kv::paged::SeqSlots { before, all }])
}

#[test]
fn paged_equals_contiguous_logits() {
    let (_d, m) = tiny_f32();
    let prompt: Vec<u32> = (3..40).collect();
    let mut contiguous = m.new_cache(64);
    let mut paged = PagedKv::new(
        N_LAYER,
        N_KV,
        HIDDEN / N_HEAD,
        (16, 4),
        KvElem::F32,
        &Device::Cpu,
    )
    .unwrap();
    let mut pool = PagePool::new(16, 4).unwrap();
    pool.admit(7, &prompt).unwrap();
    let mut next_c = prompt.clone();
    let mut next_p = prompt.clone();
    for _ in 0..12 {
        let a = m.forward(&next_c, &mut contiguous, Logits::Last).unwrap();
        let b = {
            let mut seq = append(&mut paged, &mut pool, 7, &next_p);
            m.forward(&next_p, &mut seq, Logits::Last).unwrap()
        };
        let (a, b) = (
            Model::last_logits(&a).unwrap(),
            Model::last_logits(&b).unwrap(),
        );
        assert_eq!(a, b, "the cache layout changes memory, not math");
        let t = inferlab::model::sampler::argmax(&a);
        next_c = vec![t];
        next_p = vec![t];
    }
    assert_eq!(contiguous.len(), pool.table(7).unwrap().tokens.len());
    pool.check().unwrap();
}

#[test]
fn prefix_sharing_on_equals_off() {
    let (_d, m) = tiny_f32();
    let prompt: Vec<u32> = (3..30).collect();
    let run = |sharing: bool| -> Vec<f32> {
        let mut kv = PagedKv::new(
            N_LAYER,
            N_KV,
            HIDDEN / N_HEAD,
            (32, 4),
            KvElem::F32,
            &Device::Cpu,
        )
        .unwrap();
        let mut pool = PagePool::new(32, 4).unwrap();
        pool.prefix_sharing = sharing;
        let mut out = Vec::new();
        for req in [1u64, 2] {
            let cached = pool.admit(req, &prompt).unwrap();
            if sharing && req == 2 {
                // Six full pages and two tokens of the seventh: all but the last token.
                assert_eq!(cached, 26);
            }
            let rest = &prompt[cached..];
            let mut seq = append(&mut kv, &mut pool, req, rest);
            let l = m.forward(rest, &mut seq, Logits::Last).unwrap();
            out.extend(Model::last_logits(&l).unwrap());
        }
        out
    };
    let (a, b) = (run(true), run(false));
    let d = max_abs_diff(&a, &b);
    assert!(d < 1e-4, "{d}");
}

#[test]
fn truncate_frees_emptied_pages_and_copies_a_shared_one_before_rewriting() {
    let mut pool = PagePool::new(6, 4).unwrap();
    let toks: Vec<u32> = (0..9).collect();
    pool.admit(1, &toks).unwrap();
    pool.append(1, &toks).unwrap();
    assert_eq!(pool.free_pages(), 3);
    // 9 → 8 tokens: the third page held one token and goes back.
    pool.truncate(1, 1).unwrap();
    assert_eq!(pool.free_pages(), 4);
    // 8 → 7: the second page is partly filled again and loses its prefix hash.
    let second = pool.table(1).unwrap().pages[1];
    assert!(pool.hash_of(second).is_some());
    pool.truncate(1, 1).unwrap();
    assert_eq!(pool.fill(second), 3);
    assert_eq!(pool.hash_of(second), None);
    pool.check().unwrap();
    // A fork shares the partial page; the parent rewinds into it and appends again:
    // the shared page is copied, the child's view is untouched.
    pool.fork(1, 2).unwrap();
    pool.truncate(1, 1).unwrap();
    assert_eq!(
        pool.fill(second),
        3,
        "the child still holds three tokens there"
    );
    let plan = pool.append(1, &[77]).unwrap();
    assert_eq!(plan.copies.len(), 1);
    assert_eq!(plan.copies[0].0, second);
    assert_eq!(pool.table(2).unwrap().pages[1], second);
    assert_eq!(pool.table(2).unwrap().tokens, toks[..7].to_vec());
    assert_eq!(pool.table(1).unwrap().tokens[6], 77);
    pool.check().unwrap();
    assert_eq!(pool.truncate(9, 1), Err(KvError::UnknownRequest(9)));
}

#[test]
fn a_contiguous_store_lends_its_rows_in_place_like_the_page_pool() {
    use inferlab::kv::Contiguous;
    let (n_kv, d) = (3, 4);
    let mut in_place = Contiguous::new(1, n_kv, d, 8, KvElem::F32, &Device::Cpu);
    let mut copied = Contiguous::new(1, n_kv, d, 8, KvElem::F32, &Device::Cpu);
    let vals = |n: usize, seed: f32| -> Vec<f32> { (0..n).map(|i| seed + i as f32).collect() };
    // A prefill of two tokens through the tensor path on both.
    let k = Tensor::from_vec(vals(n_kv * 2 * d, 0.0), (n_kv, 2, d), &Device::Cpu).unwrap();
    let v = Tensor::from_vec(vals(n_kv * 2 * d, 100.0), (n_kv, 2, d), &Device::Cpu).unwrap();
    for s in [&mut in_place, &mut copied] {
        s.append(0, &k, &v).unwrap();
        s.advance(2);
    }
    // One decode row: token-major in place on one, a tensor on the other.
    let (kr, vr) = (vals(n_kv * d, 500.0), vals(n_kv * d, 900.0));
    in_place.append_rows(0, &kr, &vr).unwrap();
    let to_heads = |row: &[f32]| Tensor::from_slice(row, (n_kv, 1, d), &Device::Cpu).unwrap();
    let (k_all, v_all) = copied.append(0, &to_heads(&kr), &to_heads(&vr)).unwrap();
    let rows = in_place.rows(0).expect("a CPU store lends its rows");
    assert_eq!(rows.layout.len(), 3);
    let (k_all, v_all): (Vec<f32>, Vec<f32>) = (
        k_all.flatten_all().unwrap().to_vec1().unwrap(),
        v_all.flatten_all().unwrap().to_vec1().unwrap(),
    );
    for g in 0..n_kv {
        for j in 0..3 {
            let at = rows.layout.at(n_kv, d, g, j);
            let want = (g * 3 + j) * d;
            assert_eq!(
                &rows.k.as_f32().unwrap()[at..at + d],
                &k_all[want..want + d],
                "k head {g} pos {j}"
            );
            assert_eq!(
                &rows.v.as_f32().unwrap()[at..at + d],
                &v_all[want..want + d],
                "v head {g} pos {j}"
            );
        }
    }
}
