use super::*;
use crate::MemorySite;
use brokk_model::ResourceInfo;

fn site(name: &str, slots: u32) -> MemorySite {
    let info = ResourceInfo {
        endpoint: name.into(),
        name: name.into(),
        total_slots: slots,
        ..ResourceInfo::default()
    };
    MemorySite::new(info, Time(0), Time(1_000_000))
}

fn at(s: &mut MemorySite, owner: &str, amount: u32, start: i64, length: i64) -> ReservationId {
    let req = Request {
        amount,
        duration: Duration(length),
        earliest: Time(start),
        latest: Time(start),
        flexible: false,
    };
    match s.reserve(owner, &req, None).unwrap() {
        Reply::Granted { id, .. } => id,
        other => panic!("{other:?}"),
    }
}

fn rating(s: &MemorySite, amount: u32, start: Time, length: i64) -> f64 {
    let req = Request {
        amount,
        duration: Duration(length),
        earliest: start,
        latest: start,
        flexible: false,
    };
    s.probe(&req, 1).unwrap()[0].rating
}

#[test]
fn windows_overlap_by_half_and_cover_the_span() {
    assert_eq!(
        windows(Time(0), Time(250), Duration(100)),
        [
            (Time(0), Time(100)),
            (Time(50), Time(150)),
            (Time(100), Time(200)),
            (Time(150), Time(250)),
            (Time(200), Time(300))
        ]
    );
    assert!(windows(Time(10), Time(10), Duration(100)).is_empty());
}

/// A site where a local job holds every processor from 100 to 200 and the
/// broker's job (4 processors for 20, anywhere in [0, 300)) sits in the
/// middle of the gap before it, from 40.
fn in_the_middle_of_a_gap() -> (MemorySite, [Placed; 1]) {
    let mut s = site("s", 4);
    at(&mut s, "local", 4, 100, 100);
    let id = at(&mut s, "broker", 4, 40, 20);
    let placed = [Placed {
        site: 0,
        reservation: id,
        start: Time(40),
        end: Time(60),
        amount: 4,
        earliest: Time(0),
        deadline: Time(300),
    }];
    (s, placed)
}

#[test]
fn a_job_in_the_middle_of_a_gap_moves_to_leave_less_fragmented_room() {
    let (mut s, mut placed) = in_the_middle_of_a_gap();
    let mut refs: Vec<&mut dyn Site> = vec![&mut s];
    let done = pass(Time(0), (Time(0), Time(400)), &mut placed, &mut refs, "broker");
    assert_eq!((done.considered, done.moved), (1, 1));
    let p = placed[0];
    assert_ne!(p.start, Time(40));
    assert_eq!(p.end - p.start, Duration(20));
    assert!(p.start >= Time(0) && p.end <= Time(300));
    // Where it went leaves no more fragmentation than where it was.
    s.cancel("broker", p.reservation).unwrap();
    assert!(rating(&s, 4, p.start, 20) <= rating(&s, 4, Time(40), 20));
}

#[test]
fn a_job_packed_against_its_neighbours_stays_and_one_outside_the_window_is_not_touched() {
    let mut s = site("s", 4);
    at(&mut s, "local", 4, 100, 100);
    let packed = at(&mut s, "broker", 4, 80, 20);
    let outside = at(&mut s, "broker", 2, 500, 20);
    let job = |reservation, start: i64, amount| Placed {
        site: 0,
        reservation,
        start: Time(start),
        end: Time(start + 20),
        amount,
        earliest: Time(0),
        deadline: Time(1000),
    };
    let mut placed = [job(packed, 80, 4), job(outside, 500, 2)];
    let before = placed;
    let mut refs: Vec<&mut dyn Site> = vec![&mut s];
    let done = pass(Time(0), (Time(0), Time(200)), &mut placed, &mut refs, "broker");
    assert_eq!(done.moved, 0, "{placed:?}");
    assert_eq!(placed[1], before[1]);
    assert_eq!((placed[0].start, placed[0].end), (Time(80), Time(100)));
    // A job that has started is not the broker's to move.
    let done = pass(Time(85), (Time(0), Time(200)), &mut placed, &mut refs, "broker");
    assert_eq!(done.considered, 0);
}

mod property {
    use super::*;
    use proptest::prelude::{prop, prop_assert, prop_assert_eq, proptest, ProptestConfig};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// One job searched in full with room to finish: it ends where the
        /// grid is least fragmented among every place the sites answer for
        /// it (each tried alone), its first choice or not.
        #[test]
        fn a_full_search_that_finishes_finds_the_least_fragmenting_place(
            local in prop::collection::vec((0usize..2, 1u32..=4, 0i64..300, 10i64..100), 0..6),
            (home, amount, start, length) in (0usize..2, 1u32..=4, 0i64..200, 10i64..80),
        ) {
            let mut sites = vec![site("a", 4), site("b", 4)];
            for (k, amount, start, length) in local {
                let req = Request { amount, duration: Duration(length), earliest: Time(start), latest: Time(start), flexible: false };
                let _ = sites[k].reserve("local", &req, None);
            }
            let req = Request { amount, duration: Duration(length), earliest: Time(start), latest: Time(start), flexible: false };
            let Ok(Reply::Granted { id, .. }) = sites[home].reserve("broker", &req, None) else {
                return Ok(());
            };
            let p = Placed {
                site: home,
                reservation: id,
                start: Time(start),
                end: Time(start + length),
                amount,
                earliest: Time(0),
                deadline: Time(300),
            };
            let window = (Time(0), Time(300));
            // Every place, tried alone on copies of the sites.
            let mut least = f64::INFINITY;
            let mut bare = sites.clone();
            bare[home].cancel("broker", id).unwrap();
            let (earliest, latest) = bounds(Time(0), window, &p);
            for k in 0..2 {
                let mut places = bare[k].probe(&p.request(earliest, latest), CANDIDATES).unwrap_or_default();
                places.extend(bare[k].probe(&p.request(p.start, p.start), 1).unwrap_or_default());
                for c in places {
                    let mut tried = bare.clone();
                    if let Ok(Reply::Granted { .. }) = tried[k].reserve("broker", &p.request(c.start, c.start), None) {
                        let refs: Vec<&mut dyn Site> = tried.iter_mut().map(|s| s as &mut dyn Site).collect();
                        least = least.min(grid_fragmentation(window, &refs));
                    }
                }
            }
            let mut placed = [p];
            let mut refs: Vec<&mut dyn Site> = sites.iter_mut().map(|s| s as &mut dyn Site).collect();
            let done = full_pass(Time(0), window, &mut placed, &mut refs, "broker", FULL_BUDGET);
            prop_assert!(!done.cut_short);
            prop_assert!((grid_fragmentation(window, &refs) - least).abs() < 1e-12, "{} against {least}", grid_fragmentation(window, &refs));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever is booked: only the broker's jobs wholly inside the
        /// window and not started are taken up, each ends where its bounds
        /// and the window allow with its length kept, every job is booked
        /// where `placed` says, and no site is ever over its capacity.
        #[test]
        fn a_pass_keeps_every_job_booked_within_its_bounds_and_overbooks_nothing(
            local in prop::collection::vec((0usize..3, 1u32..=8, 0i64..400, 1i64..100), 0..20),
            jobs in prop::collection::vec((0usize..3, 1u32..=8, 0i64..400, 1i64..100, 0i64..100), 1..20),
            now in 0i64..100,
            window in (0i64..300, 50i64..400),
            full in proptest::bool::ANY,
            others in prop::collection::vec((0usize..3, 1u32..=8, 0i64..400, 1i64..100), 0..4),
        ) {
            let mut sites = vec![site("a", 8), site("b", 8), site("c", 8)];
            for (k, amount, start, length) in local {
                let req = Request { amount, duration: Duration(length), earliest: Time(start), latest: Time(start), flexible: false };
                let _ = sites[k].reserve("local", &req, None);
            }
            let mut placed = Vec::new();
            for (k, amount, start, length, slack) in jobs {
                let req = Request { amount, duration: Duration(length), earliest: Time(start), latest: Time(start), flexible: false };
                if let Ok(Reply::Granted { id, start }) = sites[k].reserve("broker", &req, None) {
                    placed.push(Placed {
                        site: k,
                        reservation: id,
                        start,
                        end: start + Duration(length),
                        amount,
                        earliest: Time(start.0 - slack),
                        deadline: start + Duration(length + slack),
                    });
                }
            }
            let (from, size) = window;
            let w = (Time(from), Time(from + size));
            let before = placed.clone();
            for s in &mut sites {
                s.advance(Time(now));
            }
            let mut refs: Vec<&mut dyn Site> = sites.iter_mut().map(|s| s as &mut dyn Site).collect();
            let fragmented_before = grid_fragmentation(w, &refs);
            let trial = if full {
                // A small budget, so that searches cut short are checked too.
                try_full(Time(now), w, &mut placed, &mut refs, "broker", 300)
            } else {
                try_each(Time(now), w, &mut placed, &mut refs, "broker")
            };
            // Another broker books between the search and the switch,
            // against the schedule that still holds.
            let mut theirs = Vec::new();
            for &(k, amount, start, length) in &others {
                let req = Request { amount, duration: Duration(length), earliest: Time(start.max(now)), latest: Time(start.max(now)), flexible: false };
                if let Ok(Reply::Granted { id, start }) = refs[k].reserve("other", &req, None) {
                    theirs.push((k, id, start, start + Duration(length), amount));
                }
            }
            let done = trial.switch(&mut placed, &mut refs, "broker");
            for &(k, id, start, end, amount) in &theirs {
                let r = sites[k].core().reservation_now(id);
                prop_assert_eq!(r.map(|r| (r.start, r.end, r.amount)), Some((start, end, amount)), "the other broker's booking stands");
            }
            let refs: Vec<&mut dyn Site> = sites.iter_mut().map(|s| s as &mut dyn Site).collect();
            if done.vetoed {
                prop_assert!(!theirs.is_empty(), "only a booking made since can make a site vote no");
                prop_assert_eq!(&placed, &before, "a vetoed switch leaves the old schedule");
            }
            if full && theirs.is_empty() {
                // The sites never rate the window more fragmented than
                // the schedule the full search started from.
                prop_assert!(grid_fragmentation(w, &refs) <= fragmented_before);
            }
            let inside = before.iter().filter(|p| p.start >= Time(now).max(w.0) && p.end <= w.1).count();
            prop_assert_eq!(done.considered, inside);
            let mut moved = 0;
            for (p, b) in placed.iter().zip(&before) {
                // Booked again where it was is a new reservation, not a move.
                if (p.site, p.start) == (b.site, b.start) {
                    continue;
                }
                moved += 1;
                prop_assert!(b.start >= Time(now).max(w.0) && b.end <= w.1, "{b:?} was not the pass's to move");
                prop_assert_eq!(p.end - p.start, b.end - b.start);
                prop_assert!(p.start >= b.earliest.max(w.0).max(Time(now)) && p.end <= b.deadline.min(w.1), "{p:?} from {b:?}");
            }
            prop_assert_eq!(done.moved, moved);
            for p in &placed {
                let r = sites[p.site].core().reservation_now(p.reservation);
                prop_assert_eq!(r.map(|r| (r.start, r.end, r.amount)), Some((p.start, p.end, p.amount)));
            }
            for s in &sites {
                s.core().check_invariants();
            }
        }
    }
}

#[test]
fn the_grids_rating_falls_as_a_window_is_cut_into_pieces() {
    let (mut a, mut b) = (site("a", 4), site("b", 4));
    let window = (Time(0), Time(300));
    let whole = {
        let sites: Vec<&mut dyn Site> = vec![&mut a, &mut b];
        window_rating(window, &sites)
    };
    // The probe's own processor of four is all that cuts a free site.
    assert!((whole - 0.875).abs() < 1e-9, "{whole}");
    // Jobs scattered through the window at one site leave its free room in
    // pieces: the grid rates lower.
    for start in [20, 90, 160, 230] {
        at(&mut a, "broker", 2, start, 30);
    }
    let cut = {
        let sites: Vec<&mut dyn Site> = vec![&mut a, &mut b];
        window_rating(window, &sites)
    };
    assert!(cut < whole, "{cut} against {whole}");
    // A site full over the window has nothing left to fragment.
    at(&mut b, "local", 4, 0, 300);
    let full = {
        let sites: Vec<&mut dyn Site> = vec![&mut b];
        window_rating(window, &sites)
    };
    assert!((full - 1.0).abs() < 1e-9, "{full}");
}

/// [VRM] Fig. 5.1's case: two sites of 4; a local job holds 2 processors
/// of a from 150 to 210; the broker's two 2-processor jobs (60 and 90
/// long, anywhere in [0, 300)) sit at a from 120 and at b from 170.
fn fig_5_1() -> (MemorySite, MemorySite, [Placed; 2]) {
    let (mut a, mut b) = (site("a", 4), site("b", 4));
    at(&mut a, "local", 2, 150, 60);
    let job = |site, reservation, start: i64, length: i64| Placed {
        site,
        reservation,
        start: Time(start),
        end: Time(start + length),
        amount: 2,
        earliest: Time(0),
        deadline: Time(300),
    };
    let first = job(0, at(&mut a, "broker", 2, 120, 60), 120, 60);
    let second = job(1, at(&mut b, "broker", 2, 170, 90), 170, 90);
    (a, b, [first, second])
}

#[test]
fn the_full_search_books_together_what_each_job_alone_would_scatter() {
    // [VRM] Fig. 5.1's point: places each rated well alone can add up to a
    // fragmented grid.
    let window = (Time(0), Time(300));
    let (mut a, mut b, mut each) = fig_5_1();
    let after_each = {
        let mut refs: Vec<&mut dyn Site> = vec![&mut a, &mut b];
        pass(Time(0), window, &mut each, &mut refs, "broker");
        grid_fragmentation(window, &refs)
    };
    let (mut a, mut b, mut full) = fig_5_1();
    let mut refs: Vec<&mut dyn Site> = vec![&mut a, &mut b];
    let done = full_pass(Time(0), window, &mut full, &mut refs, "broker", FULL_BUDGET);
    assert_eq!((done.considered, done.moved, done.cut_short), (2, 2, false));
    // Both at a, where they leave a's free room one block for every
    // demand, and b free throughout: the grid is not fragmented at all.
    let places: Vec<(usize, i64, i64)> = full.iter().map(|p| (p.site, p.start.0, p.end.0)).collect();
    assert_eq!(places, [(0, 0, 60), (0, 210, 300)]);
    assert_eq!(grid_fragmentation(window, &refs), 0.0);
    assert!(after_each > 0.2, "{after_each}");
    for p in &full {
        let r = a.core().reservation_now(p.reservation).unwrap();
        assert_eq!((r.start, r.end), (p.start, p.end));
    }
}

#[test]
fn a_full_search_cut_short_keeps_the_schedule_it_had_when_nothing_better_was_rated() {
    // A budget that only books the old schedule itself: the job stays.
    let (mut s, mut placed) = in_the_middle_of_a_gap();
    let mut refs: Vec<&mut dyn Site> = vec![&mut s];
    let done = full_pass(Time(0), (Time(0), Time(400)), &mut placed, &mut refs, "broker", 1);
    assert_eq!((done.considered, done.moved, done.cut_short), (1, 0, true));
    assert_eq!((placed[0].start, placed[0].end), (Time(40), Time(60)));
    // With room to search, it leaves the middle of the gap.
    let done = full_pass(
        Time(0),
        (Time(0), Time(400)),
        &mut placed,
        &mut refs,
        "broker",
        FULL_BUDGET,
    );
    assert_eq!((done.moved, done.cut_short), (1, false));
    assert_ne!(placed[0].start, Time(40));
}

#[test]
fn the_old_schedule_binds_others_until_the_switch_and_one_site_voting_no_keeps_it_everywhere() {
    // The Fig. 5.1 case again: the full search would book both jobs at a,
    // from 0 and from 210.
    let (mut a, mut b, mut placed) = fig_5_1();
    let before = placed;
    let window = (Time(0), Time(300));
    let mut refs: Vec<&mut dyn Site> = vec![&mut a, &mut b];
    let trial = try_full(Time(0), window, &mut placed, &mut refs, "broker", FULL_BUDGET);
    // While the search waits, the old places bind everyone else: a has no
    // room over [150, 180) and b none over [170, 260) for 3.
    let over = |from: i64, to: i64| Request {
        amount: 3,
        duration: Duration(to - from),
        earliest: Time(from),
        latest: Time(from),
        flexible: false,
    };
    assert!(refs[0].probe(&over(150, 180), 1).unwrap().is_empty());
    assert!(refs[1].probe(&over(170, 260), 1).unwrap().is_empty());
    // Another broker takes a from 0 to 60, where the search put a job.
    let theirs = match refs[0].reserve("other", &over(0, 60), None).unwrap() {
        Reply::Granted { id, .. } => id,
        other => panic!("{other:?}"),
    };
    let done = trial.switch(&mut placed, &mut refs, "broker");
    assert!(done.vetoed && done.moved == 0, "{done:?}");
    assert_eq!(placed, before);
    for (s, p) in [(&a, placed[0]), (&b, placed[1])] {
        let r = s.core().reservation_now(p.reservation).unwrap();
        assert_eq!(
            (r.start, r.end),
            (p.start, p.end),
            "the old schedule holds at both sites"
        );
        s.core().check_invariants();
    }
    assert!(a.core().reservation_now(theirs).is_some());
    // Searched again on what is booked now, the switch goes through.
    let mut refs: Vec<&mut dyn Site> = vec![&mut a, &mut b];
    let done = full_pass(Time(0), window, &mut placed, &mut refs, "broker", FULL_BUDGET);
    assert!(!done.vetoed);
    for p in &placed {
        let s = if p.site == 0 { &a } else { &b };
        let r = s.core().reservation_now(p.reservation).unwrap();
        assert_eq!((r.start, r.end), (p.start, p.end));
    }
}
