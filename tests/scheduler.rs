//! The scheduler on its own, without any model: the DESIGN.md invariants of batching,
//! admission and preemption, checked iteration by iteration on seeded workloads.

mod common;

use common::serving::{cfg, workload};
use inferlab::serve::memory::Memory;
use inferlab::serve::scheduler::{Plan, Scheduler};
use inferlab::serve::ReqId;
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
        let step = inferlab::serve::snapshot::step(&s, &plan, &done, 1, 0.0, Default::default());
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

#[test]
fn a_long_prompt_s_chunks_add_up_to_it_and_no_decode_waits_behind_them() {
    // Three short requests decode; a 40-token prompt arrives at iteration 3 and is fed
    // in chunks while they go on, each still getting its token every iteration.
    let mut c = cfg(Policy::Continuous, CacheKind::Paged, 400);
    c.token_budget = 8;
    let mut reqs: Vec<Request> = (0..3u64)
        .map(|i| Request::new(i, vec![5 + i as u32; 3], 30, 0))
        .collect();
    reqs.push(Request::new(3, (100..140).collect(), 4, 3));
    let mut s = Scheduler::new(c, reqs, 2048).unwrap();
    let mut chunks = Vec::new();
    while s.requests[3].generated.is_empty() {
        let (plan, _) = iterate(&mut s);
        let decoding = plan.work.iter().filter(|w| w.id < 3).count();
        if let Some(w) = plan.work.iter().find(|w| w.id == 3) {
            chunks.push((w.from, w.n));
            assert_eq!(decoding, 3, "a decode waited behind a chunk at {plan:?}");
            assert_eq!(
                w.tokens,
                (100 + w.from as u32..100 + (w.from + w.n) as u32).collect::<Vec<_>>()
            );
        }
        assert!(plan.work.iter().map(|w| w.n).sum::<usize>() <= 8);
    }
    // The chunks are consecutive and add up to the prompt.
    let mut at = 0;
    for &(from, n) in &chunks {
        assert_eq!(from, at);
        at += n;
    }
    assert_eq!(at, 40);
    assert!(chunks.len() >= 40 / 8, "{chunks:?}");
}

#[test]
fn timed_arrivals_are_reproducible_from_the_seed_and_wait_for_the_clock() {
    use inferlab::serve::workload::{LengthDist, Workload};
    let w = |seed| Workload {
        requests: 20,
        prompt_min: 3,
        prompt_max: 8,
        output_min: 1,
        output_max: 4,
        output_dist: LengthDist::Uniform,
        mean_gap: 0.0,
        rate_per_s: 50.0,
        seed,
    };
    let src: Vec<u32> = (3..200).collect();
    let due = |seed| -> Vec<f64> {
        w(seed)
            .generate(&src)
            .iter()
            .map(|r| r.due_s.unwrap())
            .collect()
    };
    assert_eq!(due(3), due(3));
    assert_ne!(due(3), due(4));
    let d = due(3);
    assert!(d.windows(2).all(|p| p[0] <= p[1]));
    // 20 gaps of mean 1/50 s: the last arrival near 0.4 s (loosely: it is random).
    assert!(d[19] > 0.1 && d[19] < 1.2, "{}", d[19]);
    // Before its time a request has not arrived, and the scheduler says when it will.
    let mut s = Scheduler::new(
        cfg(Policy::Continuous, CacheKind::Paged, 400),
        w(3).generate(&src),
        2048,
    )
    .unwrap();
    let plan = s.schedule(d[0] - 1e-6).unwrap();
    assert!(plan.work.is_empty() && s.queue().is_empty());
    assert_eq!(s.idle_until(), Some(d[0]));
    let plan = s.schedule(d[0]).unwrap();
    assert_eq!(plan.work.len(), 1);
    assert_eq!(s.requests[0].arrival_s, d[0]);
}
