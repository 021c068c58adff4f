use super::*;

#[test]
fn categories_that_cannot_be_worked_out_are_said_and_not_awaited() {
    let loaded = crate::load::load(Path::new(crate::sample::PATH), None).expect("the sample");
    let doc = Document::build_outline(loaded, std::time::Duration::ZERO);
    assert!(doc.categories_pending());
    let trace = Arc::clone(&doc.trace);
    let mut session = Session { doc: Some(doc), ..Session::default() };
    assert!(session.working_out_categories());
    // A job whose result does not fit: no set of categories for the one device.
    let job: CategoriesJob = Job::spawn("categories", || {}, |_| Vec::new(), |_| Vec::new());
    session.categories = Some((trace, job));
    for _ in 0..1000 {
        session.poll_categories();
        if session.categories.is_none() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let doc = session.doc.as_ref().expect("the document");
    assert!(doc.categories_failed && !doc.categories_pending());
    assert!(!session.working_out_categories(), "still said to be worked out");
    assert!(session.errors.iter().any(|e| e.contains("could not be worked out")), "{:?}", session.errors);
    // Not tried again.
    session.start_categories(&egui::Context::default());
    assert!(session.categories.is_none());
}
