use super::*;

#[test]
fn ids_are_distinct_and_groups_exclude_within() {
    let mut ids: Vec<&str> = Remedy::ALL.iter().map(|r| r.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), Remedy::ALL.len());
    assert!(Remedy::AmpBf16.excludes(Remedy::AmpFp16));
    assert!(Remedy::Zero1.excludes(Remedy::Zero3));
    assert!(!Remedy::AmpBf16.excludes(Remedy::Sgd));
    assert!(!Remedy::MicroBatchHalf.excludes(Remedy::MicroBatchHalf));
}
