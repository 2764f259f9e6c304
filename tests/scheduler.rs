//! The scheduler on its own, without any model: the DESIGN.md invariants of batching,
//! admission and preemption, checked iteration by iteration on seeded workloads.

mod common;

use common::serving::{cfg, workload};
use inferlab::kv::pool::ReqId;
use inferlab::serve::scheduler::{Memory, Plan, Scheduler};
use inferlab::serve::{CacheKind, Policy, ReqPhase, Request};

/// What the model hands back, without a model: every sampled token is 7. The runner
/// touches nothing of the scheduler's (the plan already holds every slot), so this is
/// all a pass does here.
fn run_pass(plan: &Plan) -> Vec<Option<u32>> {
    plan.work.iter().map(|w| w.sample.then_some(7)).collect()
}

/// One iteration; returns the plan and the finished requests.
fn iterate(s: &mut Scheduler) -> (Plan, Vec<ReqId>) {
    let plan = s.schedule(0.0).unwrap();
    let tokens = run_pass(&plan);
    let done = s.postprocess(&plan, &tokens, None, 0.0);
    (plan, done)
}

#[test]
fn every_iteration_keeps_the_budgets_and_nobody_starves() {
    for seed in 0..6 {
        for policy in [Policy::Static, Policy::Continuous] {
            for cache in [CacheKind::Paged, CacheKind::Contiguous] {
                let c = cfg(policy, cache, 96);
                let mut s = Scheduler::new(c.clone(), workload(30, 1.5, seed), 2048).unwrap();
                let mut prev: Vec<ReqId> = Vec::new();
                let mut iterations = 0;
                while !s.done() {
                    let (plan, _) = iterate(&mut s);
                    s.check_memory().unwrap();
                    let running = s.running().to_vec();
                    assert!(running.len() <= c.max_batch, "sequence cap");
                    let tokens: usize = plan.work.iter().map(|w| w.n).sum();
                    assert!(tokens <= c.token_budget, "token budget");
                    let used = match &s.memory {
                        Memory::Paged(p) => p.stats().used_pages * c.page_size,
                        Memory::Reserved(_) => s.reserved(),
                    };
                    assert!(used <= c.kv_budget_tokens, "KV budget");
                    let joined = running.iter().any(|r| !prev.contains(r));
                    let stayed = running.iter().any(|r| prev.contains(r));
                    if policy == Policy::Static {
                        assert!(!(joined && stayed), "static batching admitted mid-batch");
                    }
                    prev = running;
                    iterations += 1;
                    assert!(iterations < 10_000, "{policy:?} {cache:?} never ends");
                }
                // Nobody starved: everyone got every token it asked for.
                for r in &s.requests {
                    assert_eq!(r.phase, ReqPhase::Finished, "{policy:?} {cache:?}");
                    assert_eq!(r.generated.len(), r.max_new);
                }
                let all = if cache == CacheKind::Paged { 24 } else { 96 };
                assert_eq!(s.free_capacity(), all, "every page and slot returned");
            }
        }
    }
}

#[test]
fn continuous_batching_admits_while_others_run_and_static_waits() {
    // Everything arrives at once; the batch cap is 6, so the seventh must wait.
    let run = |policy| {
        let mut s = Scheduler::new(
            cfg(policy, CacheKind::Paged, 400),
            workload(12, 0.0, 1),
            2048,
        )
        .unwrap();
        let mut admitted_mid_batch = false;
        while !s.done() {
            let before = s.running().to_vec();
            iterate(&mut s);
            let still = s.running().iter().any(|r| before.contains(r));
            let joined = s.running().iter().any(|r| !before.contains(r));
            admitted_mid_batch |= still && joined && !before.is_empty();
        }
        (admitted_mid_batch, s.iteration)
    };
    let (mid_c, iters_c) = run(Policy::Continuous);
    let (mid_s, iters_s) = run(Policy::Static);
    assert!(
        mid_c,
        "continuous batching refills the batch as requests finish"
    );
    assert!(!mid_s, "static batching waits for the whole batch");
    assert!(iters_c < iters_s, "{iters_c} vs {iters_s}");
}

#[test]
fn long_prompts_are_chunked_to_the_token_budget() {
    let mut c = cfg(Policy::Continuous, CacheKind::Paged, 400);
    c.token_budget = 5;
    let reqs = vec![Request::new(0, (1..=13).collect(), 2, 0)];
    let mut s = Scheduler::new(c, reqs, 2048).unwrap();
    let chunks: Vec<(usize, usize, bool)> = (0..3)
        .map(|_| {
            let (p, _) = iterate(&mut s);
            (p.work[0].from, p.work[0].n, p.work[0].sample)
        })
        .collect();
    // 13 prompt tokens in chunks of 5, 5, 3; only the last chunk samples a token.
    assert_eq!(chunks, [(0, 5, false), (5, 5, false), (10, 3, true)]);
    assert_eq!(s.requests[0].generated, [7]);
}

#[test]
fn preemption_frees_the_newest_request_and_puts_it_back_first() {
    // Two requests that each grow past what the pool holds for both.
    let mut c = cfg(Policy::Continuous, CacheKind::Paged, 16);
    c.prefix_sharing = false;
    let reqs = vec![
        Request::new(0, vec![1, 2, 3, 4], 10, 0),
        Request::new(1, vec![5, 6, 7], 10, 0),
    ];
    let mut s = Scheduler::new(c, reqs, 2048).unwrap();
    let mut seen = None;
    while !s.done() && seen.is_none() {
        let (plan, _) = iterate(&mut s);
        if let Some(&v) = plan.preempted.first() {
            seen = Some((v, plan));
        }
    }
    let (victim, _) = seen.expect("the pool is too small for both: someone is preempted");
    assert_eq!(victim, 1, "the most recently admitted request goes");
    let Memory::Paged(pool) = &s.memory else {
        unreachable!()
    };
    assert!(
        pool.table(victim).is_none(),
        "every page of the victim is freed"
    );
    let r = &s.requests[victim as usize];
    assert_eq!(r.preemptions, 1);
    // Back at the head of the queue, to recompute from scratch when it is readmitted.
    assert_eq!(r.computed, 0);
    assert_eq!(r.phase, ReqPhase::Preempted);
    assert_eq!(s.queue().first(), Some(&victim));
    s.check_memory().unwrap();
    while !s.done() {
        iterate(&mut s);
    }
    assert!(s.requests.iter().all(|r| r.generated.len() == r.max_new));
    assert_eq!(s.free_capacity(), 4);
}

#[test]
fn a_request_that_could_never_fit_is_rejected_at_arrival() {
    let reqs = vec![
        Request::new(0, vec![1; 10], 200, 0),
        Request::new(1, vec![], 4, 0),
        Request::new(2, vec![1, 2], 4, 0),
    ];
    let mut s = Scheduler::new(
        cfg(Policy::Continuous, CacheKind::Contiguous, 64),
        reqs,
        2048,
    )
    .unwrap();
    iterate(&mut s);
    let why = |i: usize| s.requests[i].reject_reason.clone().unwrap_or_default();
    assert!(why(0).contains("needs 210 KV slots"), "{}", why(0));
    assert_eq!(why(1), "empty prompt");
    assert_eq!(s.requests[2].phase, ReqPhase::Decode);
    assert!(Scheduler::new(cfg(Policy::Static, CacheKind::Paged, 2), Vec::new(), 2048).is_err());
}

#[test]
fn a_contiguous_cache_strands_free_slots_in_gaps_too_short_for_the_next_request() {
    // 64 slots: r0 takes 0..20, r1 20..52 (long-lived), r2 52..64. r3 needs 24 in one run.
    let reqs = vec![
        Request::new(0, vec![1; 10], 10, 0),
        Request::new(1, vec![1; 2], 30, 0),
        Request::new(2, vec![1; 10], 2, 0),
        Request::new(3, vec![1; 4], 20, 1),
    ];
    let mut s = Scheduler::new(
        cfg(Policy::Continuous, CacheKind::Contiguous, 64),
        reqs,
        2048,
    )
    .unwrap();
    let mut seen = false;
    while !s.done() {
        let (plan, done) = iterate(&mut s);
        s.check_memory().unwrap();
        let step = inferlab::serve::view::step(&s, &plan, &done, 1, 0.0, Default::default());
        let free: usize = step.gaps.iter().map(|g| g.1).sum();
        assert_eq!(free, s.free_capacity(), "the gaps are the free slots");
        if s.queue() == vec![3] && s.running() == [1] && free >= 24 {
            // r0 and r2 have left, r1 still runs: 32 slots free, in gaps of 20 and 12.
            seen = true;
            assert_eq!(step.gaps, vec![(0, 20), (52, 12)]);
            assert_eq!((step.memory.largest_gap, step.memory.head_need), (20, 24));
        }
    }
    assert!(seen, "r3 waited with enough free slots in all");
    assert!(s.fragmentation_waits > 0);
    // It ran once r1 left and the arena was whole again.
    assert_eq!(s.requests[3].generated.len(), 20);
}
