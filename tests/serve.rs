//! Scheduler and engine invariants on the tiny model.

mod common;

use common::serving::{cfg, workload};
use common::*;
use inferlab::kv::KvElem;
use inferlab::model::session::Session;
use inferlab::model::{Logits, Model, RunOptions, SamplerConfig};
use inferlab::serve::{CacheKind, Policy, ReqPhase, Request, ServeEngine};

fn run_all(e: &mut ServeEngine) -> Vec<inferlab::serve::ServeStep> {
    let mut steps = Vec::new();
    while !e.done() {
        steps.push(e.step().unwrap());
        assert!(steps.len() < 20_000, "no progress");
    }
    steps
}

#[test]
fn invariants_hold_for_every_policy_and_cache() {
    let (_d, m) = tiny_f32();
    for policy in [Policy::Static, Policy::Continuous] {
        for cache in [CacheKind::Paged, CacheKind::Contiguous] {
            let c = cfg(policy, cache, 96);
            let mut e = ServeEngine::new(&m, c.clone(), workload(30, 1.5, 3)).unwrap();
            let mut prev_running: Vec<u64> = Vec::new();
            while !e.done() {
                let s = e.step().unwrap();
                e.check_pool().unwrap();
                let running: Vec<u64> = e.running().to_vec();
                assert!(running.len() <= c.max_batch, "sequence cap");
                assert!(s.tokens_scheduled <= c.token_budget, "token budget");
                assert!(
                    s.memory.allocated_slots <= s.memory.capacity_tokens,
                    "KV budget"
                );
                if policy == Policy::Static {
                    // A request may join only when the previous batch has wholly finished.
                    let joined: Vec<_> = running
                        .iter()
                        .filter(|r| !prev_running.contains(r))
                        .collect();
                    let stayed = running.iter().any(|r| prev_running.contains(r));
                    assert!(
                        joined.is_empty() || !stayed,
                        "static batching admitted mid-batch"
                    );
                }
                prev_running = running;
            }
            // No starvation: everyone finished.
            assert!(
                e.requests().iter().all(|r| r.phase == ReqPhase::Finished),
                "{policy:?} {cache:?}"
            );
            assert_eq!(
                e.free_capacity(),
                if cache == CacheKind::Paged { 24 } else { 96 }
            );
        }
    }
}

#[test]
fn continuous_admits_mid_batch_and_beats_static_on_iterations() {
    let (_d, m) = tiny_f32();
    let mut its = Vec::new();
    for policy in [Policy::Static, Policy::Continuous] {
        let mut e =
            ServeEngine::new(&m, cfg(policy, CacheKind::Paged, 400), workload(24, 0.0, 9)).unwrap();
        let steps = run_all(&mut e);
        if policy == Policy::Continuous {
            let joined_mid = steps.windows(2).any(|w| {
                let before: Vec<u64> = w[0]
                    .active
                    .iter()
                    .filter(|a| a.phase == ReqPhase::Decode)
                    .map(|a| a.id)
                    .collect();
                w[1].active.iter().any(|a| {
                    a.phase == ReqPhase::Prefill || (a.scheduled > 1 && !before.contains(&a.id))
                }) && w[1].active.iter().any(|a| before.contains(&a.id))
            });
            assert!(
                joined_mid,
                "continuous batching joins requests into a running batch"
            );
        }
        its.push(steps.len());
    }
    assert!(
        its[1] < its[0],
        "continuous needs fewer iterations: {its:?}"
    );
}

#[test]
fn static_batch_is_rigid_until_its_longest_request_finishes() {
    let (_d, m) = tiny_f32();
    let reqs = workload(12, 0.0, 21);
    for cache in [CacheKind::Paged, CacheKind::Contiguous] {
        let mut e = ServeEngine::new(&m, cfg(Policy::Static, cache, 400), reqs.clone()).unwrap();
        let steps = run_all(&mut e);
        e.check_pool().unwrap();
        let mut padding_seen = 0;
        for s in &steps {
            for a in s.active.iter().filter(|a| a.phase == ReqPhase::Padding) {
                // A padding row really runs: one token through the whole model.
                assert_eq!(a.scheduled, 1, "{cache:?} iteration {}", s.iteration);
                padding_seen += 1;
            }
            let rows = s.active.iter().filter(|a| a.scheduled > 0).count();
            assert!(s.tokens_generated <= rows);
        }
        assert!(padding_seen > 0, "lengths differ, so some rows pad");
        assert_eq!(padding_seen, e.padding_rows());
        // Each batch leaves together: members admitted in one iteration finish in one.
        let mut by_batch = std::collections::BTreeMap::new();
        for r in e.requests() {
            by_batch
                .entry(r.admitted_at.unwrap())
                .or_insert_with(Vec::new)
                .push(r.finished_at.unwrap());
        }
        assert!(by_batch.len() >= 2);
        for ends in by_batch.values() {
            assert!(ends.iter().all(|&f| f == ends[0]), "{cache:?}: {ends:?}");
        }
        // Padding re-runs a position in place: nobody's tokens change.
        for r in e.requests() {
            assert_eq!(r.generated, alone(&m, &reqs[r.id as usize]), "{cache:?}");
        }
    }
}

#[test]
fn contiguous_can_reserve_the_whole_context() {
    let (_d, m) = tiny_f32();
    // The tiny model's context is 64 tokens: a 200-slot budget holds three reservations.
    let mut c = cfg(Policy::Continuous, CacheKind::Contiguous, 200);
    c.reserve = inferlab::serve::Reserve::Context;
    let reqs = workload(8, 0.0, 2);
    let mut e = ServeEngine::new(&m, c.clone(), reqs.clone()).unwrap();
    let mut peak = 0;
    while !e.done() {
        let s = e.step().unwrap();
        peak = peak.max(e.running().len());
        assert!(s
            .reservations
            .iter()
            .all(|&(_, reserved, _)| reserved == 64));
        e.check_pool().unwrap();
    }
    assert_eq!(peak, 3);
    // The same requests reserving prompt + max new tokens run more at once.
    c.reserve = Default::default();
    let mut e = ServeEngine::new(&m, c.clone(), reqs).unwrap();
    let mut tight = 0;
    while !e.done() {
        e.step().unwrap();
        tight = tight.max(e.running().len());
    }
    assert!(tight > peak, "{tight} vs {peak}");
    // A budget below one context window can hold no request at all: each is rejected
    // with the reason.
    c.reserve = inferlab::serve::Reserve::Context;
    c.kv_budget_tokens = 48;
    let mut e = ServeEngine::new(&m, c, workload(2, 0.0, 2)).unwrap();
    e.step().unwrap();
    for r in e.requests() {
        assert_eq!(r.phase, ReqPhase::Rejected);
        assert!(r.reject_reason.as_ref().unwrap().contains("whole context"));
    }
}

fn alone(m: &Model, r: &Request) -> Vec<u32> {
    let mut s = Session::new(m, r.prompt.clone(), r.max_new, SamplerConfig::default());
    let mut out = Vec::new();
    for _ in 0..r.max_new {
        let i = s.step().unwrap();
        out.push(i.token_id);
        if i.is_eos {
            break;
        }
    }
    out
}

/// Under every element type of the cache: each row is rounded on its own, so batching,
/// paging and reservation change no token.
#[test]
fn a_batch_equals_each_request_alone() {
    let (_d, base) = tiny_f32();
    let reqs = workload(6, 0.0, 5);
    for kv_elem in KvElem::ALL {
        let run = RunOptions {
            kv_elem,
            ..base.run_options()
        };
        let m = base.with_run(run).unwrap();
        each_served_as_alone(&m, &m, &reqs, &kv_elem.to_string());
    }
}

/// Serves `reqs` on `m` with continuous batching, on pages and in contiguous
/// reservations, and checks each request generated what it generates alone on `alone_on`.
fn each_served_as_alone(m: &Model, alone_on: &Model, reqs: &[Request], what: &str) {
    for cache in [CacheKind::Paged, CacheKind::Contiguous] {
        let mut e =
            ServeEngine::new(m, cfg(Policy::Continuous, cache, 400), reqs.to_vec()).unwrap();
        run_all(&mut e);
        for r in e.requests() {
            assert_eq!(
                r.generated,
                alone(alone_on, &reqs[r.id as usize]),
                "request {} ({cache:?}, {what})",
                r.id
            );
        }
    }
}

/// The batched attention route through the serving engine: pages and the contiguous
/// arena as slot tensors, every step's attention at once, chunked prompts included; each
/// request gets what it gets alone on the host route. (A store of slot tensors refuses the
/// host route's rows, so the batched route is what ran.)
#[test]
fn the_batched_route_serves_each_request_what_it_gets_alone() {
    let (_d, base) = tiny_f32();
    let host = base.clone();
    let m = base
        .with_run(RunOptions {
            route: inferlab::model::AttnRoute::Batched,
            ..base.run_options()
        })
        .unwrap();
    let reqs = workload(8, 0.0, 7);
    each_served_as_alone(&m, &host, &reqs, "batched route");
}

/// A prompt's rows stored as f16 or int8 are decoded once for the whole span and read
/// token-major; fed one token at a time, each row is decoded as it is read. Both give
/// the same logits (to the rounding of K and V computed in another batch shape, which
/// f16 and int8 can move by a step), so the decoded copy holds every row where its
/// position says: a row out of place moves them by tenths.
#[test]
fn a_prompt_at_once_equals_it_token_by_token_under_every_element_type() {
    let (_d, base) = tiny_f32();
    let prompt: Vec<u32> = (0..23u32).map(|i| 3 + (i * 37 % 200)).collect();
    for kv_elem in KvElem::ALL {
        let m = base
            .with_run(RunOptions {
                kv_elem,
                ..base.run_options()
            })
            .unwrap();
        let mut whole = m.new_cache(64);
        let at_once = m.forward(&prompt, &mut whole, Logits::All).unwrap();
        let at_once: Vec<Vec<f32>> = at_once.to_vec2().unwrap();
        let mut one = m.new_cache(64);
        for (i, &t) in prompt.iter().enumerate() {
            let l = m.forward(&[t], &mut one, Logits::Last).unwrap();
            let l: Vec<f32> = l.flatten_all().unwrap().to_vec1().unwrap();
            assert!(
                max_abs_diff(&l, &at_once[i]) < 1e-3,
                "{kv_elem}, position {i}: {}",
                max_abs_diff(&l, &at_once[i])
            );
        }
    }
}

#[test]
fn preemption_by_recompute_gives_the_same_tokens() {
    let (_d, m) = tiny_f32();
    let reqs = workload(12, 0.0, 11);
    let mut big = ServeEngine::new(
        &m,
        cfg(Policy::Continuous, CacheKind::Paged, 800),
        reqs.clone(),
    )
    .unwrap();
    run_all(&mut big);
    let mut small =
        ServeEngine::new(&m, cfg(Policy::Continuous, CacheKind::Paged, 48), reqs).unwrap();
    let steps = run_all(&mut small);
    assert!(small.preemptions() > 0, "the small pool must run dry");
    for s in steps.iter().filter(|s| !s.preempted.is_empty()) {
        for v in &s.preempted {
            assert!(
                s.queue.first() == Some(v) || s.queue.contains(v),
                "victim back in the queue"
            );
        }
    }
    for (a, b) in big.requests().iter().zip(small.requests()) {
        assert_eq!(a.generated, b.generated, "request {}", a.id);
    }
    small.check_pool().unwrap();
    assert_eq!(small.free_capacity(), 12);
}

#[test]
fn never_fitting_request_is_rejected_while_others_go_on() {
    let (_d, m) = tiny_f32();
    let mut reqs = workload(4, 0.0, 2);
    reqs[1].max_new = 500;
    let mut e = ServeEngine::new(&m, cfg(Policy::Continuous, CacheKind::Paged, 64), reqs).unwrap();
    run_all(&mut e);
    assert_eq!(e.requests()[1].phase, ReqPhase::Rejected);
    assert!(e.requests()[1]
        .reject_reason
        .as_ref()
        .unwrap()
        .contains("whole budget is 64"));
    assert!([0, 2, 3]
        .iter()
        .all(|&i| e.requests()[i].phase == ReqPhase::Finished));
}

#[test]
fn bad_settings_are_refused() {
    use inferlab::serve::{ServeConfig, ServeError};
    let (_d, m) = tiny_f32();
    let refused = |c: &ServeConfig, want: &str| match ServeEngine::new(&m, c.clone(), vec![]) {
        // Settings are the user's to fix: the kind says so, the text says what.
        Err(ServeError::Config(why)) => assert!(why.contains(want), "{why}"),
        Err(e) => panic!("{want}: refused as another kind: {e}"),
        Ok(_) => panic!("{want}: accepted"),
    };
    let mut c = cfg(Policy::Continuous, CacheKind::Paged, 64);
    c.page_size = 0;
    refused(&c, "page size");
    c.page_size = 128;
    refused(&c, "smaller than one page");
    c.page_size = 4;
    c.max_batch = 0;
    refused(&c, "batch size");
}

#[test]
fn soak_ten_thousand_iterations_ends_with_every_page_free() {
    let (_d, m) = tiny_f32();
    let mut c = cfg(Policy::Continuous, CacheKind::Paged, 80);
    c.max_batch = 4;
    let mut e = ServeEngine::new(&m, c, workload(4000, 2.5, 99)).unwrap();
    let mut n = 0;
    while n < 10_000 || !e.done() {
        e.step().unwrap();
        n += 1;
        if n % 500 == 0 {
            e.check_pool().unwrap();
        }
        assert!(n < 30_000);
    }
    e.check_pool().unwrap();
    assert_eq!(e.free_capacity(), 20, "every page returned");
    assert!(e.requests().iter().all(|r| r.phase == ReqPhase::Finished));
}

#[test]
fn the_app_chat_workload_shows_a_copy_on_write_when_the_repeated_question_runs() {
    use inferlab::model::{LoadOptions, Model};
    let model = Model::load(&common::real_model(), &LoadOptions::default()).unwrap();
    let (rate, _) = inferlab::serve::workload::chat_rate(&model).unwrap();
    let (cfg, reqs) =
        inferlab::worker::chat_serving(&model, Policy::Continuous, CacheKind::Paged, rate).unwrap();
    // The one request that asks an earlier one's question again.
    let (last, before) = (1..reqs.len())
        .find_map(|i| {
            (0..i)
                .find(|&j| reqs[j].prompt == reqs[i].prompt)
                .map(|j| (i as u64, j as u64))
        })
        .expect("a repeated question");
    let mut e = ServeEngine::new(&model, cfg, reqs).unwrap();
    let mut copies = Vec::new();
    while !e.done() {
        let s = e.step().unwrap();
        e.check_pool().unwrap();
        copies.extend(s.copies.iter().copied());
    }
    // The repeated question shared the partly filled page after the full ones, and the
    // first write into it copied it: the repeated request's last prompt token, or the
    // earlier request's next token when it was still decoding (arrivals follow the clock,
    // so which of the two writes first depends on this machine's speed).
    assert!(
        copies.iter().any(|c| c.0 == last || c.0 == before),
        "no copy-on-write for r{last} or r{before}: {copies:?}"
    );
    let out = |id: u64| e.requests()[id as usize].generated.clone();
    assert_eq!(
        out(last),
        out(before)[..out(last).len().min(out(before).len())].to_vec()
    );
}

#[test]
fn every_token_keeps_its_time_and_the_run_gives_ttft_and_inter_token_latency() {
    use inferlab::serve::latency::{ttft_s, Latency};
    let (_d, m) = tiny_f32();
    let mut e = ServeEngine::new(
        &m,
        cfg(Policy::Continuous, CacheKind::Paged, 400),
        workload(8, 1.0, 3),
    )
    .unwrap();
    run_all(&mut e);
    for r in e.requests() {
        assert_eq!(r.token_s.len(), r.generated.len(), "request {}", r.id);
        assert!(r.token_s.windows(2).all(|w| w[0] <= w[1]));
        // A token comes out after its request arrived, and its time is the engine's.
        let t = ttft_s(r).unwrap();
        assert!(t >= 0.0 && r.token_s.last().unwrap() <= r.finished_s.as_ref().unwrap());
    }
    let l = Latency::of(e.requests());
    assert!(
        l.ttft_ms_p50 > 0.0 && l.ttft_ms_p99 >= l.ttft_ms_p50,
        "{l:?}"
    );
    assert!(l.itl_ms_p50 > 0.0 && l.itl_ms_p99 >= l.itl_ms_p50, "{l:?}");
}

#[test]
fn the_app_s_chunked_run_feeds_a_long_prompt_over_several_iterations() {
    use inferlab::serve::workload::{app_serving, AppWorkload, APP_CHUNK_TOKENS};
    let m = Model::load(&common::real_model(), &Default::default()).unwrap();
    let how = (Policy::Continuous, CacheKind::Paged);
    let (whole, _) = app_serving(&m, how, (AppWorkload::Long, 0.0), false, false).unwrap();
    let (cfg, reqs) = app_serving(&m, how, (AppWorkload::Long, 0.0), false, true).unwrap();
    assert_eq!(cfg.token_budget, APP_CHUNK_TOKENS);
    assert!(whole.token_budget > APP_CHUNK_TOKENS);
    let longest = reqs.iter().map(|r| r.prompt.len()).max().unwrap();
    assert!(longest > APP_CHUNK_TOKENS, "{longest}");
    let mut e = ServeEngine::new(&m, cfg, reqs).unwrap();
    // Every iteration keeps to the budget until the first answers start.
    for _ in 0..4 {
        let s = e.step().unwrap();
        let scheduled: usize = s.active.iter().map(|a| a.scheduled).sum();
        assert!(scheduled <= APP_CHUNK_TOKENS, "{scheduled}");
    }
}

#[test]
fn the_engine_s_clock_counts_its_own_iterations_and_jumps_over_idle_waits() {
    use inferlab::serve::latency::ttft_s;
    let (_d, m) = tiny_f32();
    let mut reqs = workload(3, 0.0, 5);
    // The first request arrives a minute in, the others a little after it.
    for (i, r) in reqs.iter_mut().enumerate() {
        (r.arrival, r.due_s) = (0, Some(60.0 + 0.001 * i as f64));
    }
    let mut e = ServeEngine::new(&m, cfg(Policy::Continuous, CacheKind::Paged, 96), reqs).unwrap();
    // Nothing to do: the engine waits for the first arrival without sleeping through it.
    let t = std::time::Instant::now();
    e.step().unwrap();
    assert!(t.elapsed().as_secs_f64() < 5.0);
    assert!(e.clock_s() >= 60.0, "{}", e.clock_s());
    assert_eq!(e.requests()[0].arrival_s, 60.0);
    // Time between iterations (a learner reading the screen) is not the engine's.
    let before = e.clock_s();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let s = e.step().unwrap();
    let gained = e.clock_s() - before;
    assert!(
        (gained - s.wall_ms / 1e3).abs() < 1e-9,
        "{gained} s on the clock for an iteration of {} ms",
        s.wall_ms
    );
    run_all(&mut e);
    for r in e.requests() {
        let t = ttft_s(r).unwrap();
        assert!((0.0..0.3).contains(&t), "request {}: TTFT {t} s", r.id);
    }
}

#[test]
fn in_the_app_chat_workload_memory_binds_first_and_pages_run_more_requests_than_reservations() {
    use inferlab::model::{LoadOptions, Model};
    use inferlab::serve::scheduler::Wait;
    let model = Model::load(&common::real_model(), &LoadOptions::default()).unwrap();
    // Arrivals a few iterations apart (rate 0), not by this machine's clock: the same
    // schedule on every machine and under any load.
    let rate = 0.0;
    let run = |cache| {
        let (cfg, reqs) =
            inferlab::worker::chat_serving(&model, Policy::Continuous, cache, rate).unwrap();
        let cap = cfg.max_batch;
        let mut e = ServeEngine::new(&model, cfg, reqs).unwrap();
        let (mut most, mut iters, mut waits) = (0, 0, Vec::new());
        while !e.done() {
            let s = e.step().unwrap();
            let running = s
                .active
                .iter()
                .filter(|a| a.phase != ReqPhase::Finished)
                .count();
            most = most.max(running);
            waits.extend(s.head_wait);
            iters += 1;
        }
        (most, iters, waits, cap)
    };
    let (paged, paged_iters, paged_waits, cap) = run(CacheKind::Paged);
    let (contiguous, contiguous_iters, contiguous_waits, _) = run(CacheKind::Contiguous);
    eprintln!(
        "most at once: paged {paged}, contiguous {contiguous}; iterations: {paged_iters} vs {contiguous_iters}"
    );
    // The point of paging, in the same KV budget: more requests at once...
    assert!(
        contiguous * 10 <= paged * 6,
        "contiguous ran at most {contiguous}, paged {paged}"
    );
    // ...because memory binds first, not the batch limit...
    assert!(paged < cap, "paged reached the batch limit {cap}");
    assert!(
        contiguous_waits.contains(&Wait::Memory),
        "{contiguous_waits:?}"
    );
    assert!(!paged_waits.contains(&Wait::BatchLimit), "{paged_waits:?}");
    // ...so the same requests are served in fewer iterations.
    assert!(
        paged_iters < contiguous_iters,
        "{paged_iters} vs {contiguous_iters}"
    );
}
