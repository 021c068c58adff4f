use super::Used;

#[test]
fn used_takes_runs_whole_or_not_at_all() {
    let mut used = Used::new(200);
    assert!(used.take_run(10, 100)); // across the first word boundary
    assert!(!used.take(10) && !used.take(109));
    assert!(used.take(110));
    // Overlapping what was taken: nothing of it is taken.
    assert!(!used.take_run(100, 20));
    assert!(used.take(111) && used.take(119));
    assert!(used.take_run(0, 10));
    assert!(used.take_run(128, 64)); // one whole word
    assert!(!used.take_run(192, 9)); // past the entries
    assert!(used.take_run(192, 8));
    assert!(!used.take_run(5, 0));
    assert!(!used.take(200) && !used.take(u32::MAX));
    let untaken: Vec<u32> = (0..200).filter(|&i| used.take(i)).collect();
    assert_eq!(untaken, (112..119).chain(120..128).collect::<Vec<_>>());
}
