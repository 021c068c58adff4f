use super::*;

#[test]
fn a_recording_has_segments_from_its_events() {
    use vramscope_trace_format::Event;
    let mut trace = Trace::default();
    let mib = 1u64 << 20;
    trace.events = vec![
        Event::new(EventKind::SegmentAlloc, 1, 0, 0x1000_0000, 2 * mib),
        Event::new(EventKind::Alloc, 2, 0, 0x1000_0000, mib),
        Event::new(EventKind::SegmentAlloc, 3, 0, 0x2000_0000, mib),
        Event::new(EventKind::SegmentFree, 4, 0, 0x2000_0000, mib),
    ];
    let at = instant(&trace, DeviceId(0), Some(2), 3);
    assert_eq!(at.segments.iter().map(|s| s.address).collect::<Vec<_>>(), [0x1000_0000, 0x2000_0000]);
    let first = &at.segments[0];
    assert_eq!(first.blocks.len(), 1);
    assert_eq!(first.fragmentation.free_external_bytes, mib);
    assert_eq!(at.total.reserved_bytes, 3 * mib);
    let end = instant(&trace, DeviceId(0), Some(3), 4);
    assert_eq!(end.segments.len(), 1);
    assert!(instant(&trace, DeviceId(0), None, 0).segments.is_empty());
}

#[test]
fn noise_frames() {
    assert!(is_noise_frame("??", "_PyEval_EvalFrameDefault"));
    assert!(is_noise_frame("??", "torch::unwind::unwind()"));
    assert!(is_noise_frame("CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::malloc(void**)"));
    assert!(is_noise_frame("/venv/lib/torch/nn/modules/module.py", "_call_impl"));
    assert!(!is_noise_frame("/home/me/model.py", "forward"));
    assert!(!is_noise_frame("??", "at::native::empty_cuda(c10::ArrayRef<long>)"));
    assert_eq!(frame_label("forward", "/a/b/c/d/model.py", 12), "forward  c/d/model.py:12");
    assert_eq!(
        short_native_name("void at::meta::common_checks<at::meta::bmm>(at::meta::bmm&, at::Tensor const&)"),
        "at::meta::common_checks"
    );
    assert_eq!(
        short_native_name("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*)"),
        "at::detail::_empty_generic"
    );
    assert_eq!(
        short_native_name(
            "c10::impl::wrap_kernel_functor_unboxed_<c10::F<at::Tensor (at::Tensor const&)>, at::Tensor>::call(c10::OperatorKernel*)"
        ),
        "c10::impl::wrap_kernel_functor_unboxed_<c10::F<at::Tensor (at::Tensor const&)>, at::Tensor>::call"
    );
    assert_eq!(short_native_name("_PyEval_EvalFrameDefault"), "_PyEval_EvalFrameDefault");
    assert_eq!(short_native_name("torch::unwind::unwind()"), "torch::unwind::unwind");
    assert_eq!(short_native_name("operator()"), "operator");
    assert_eq!(
        short_native_name("at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA_empty(c10::ArrayRef<long>)"),
        "at::wrapper_CUDA_empty"
    );
    assert_eq!(frame_label("einsum", "D:\\venv\\torch\\functional.py", 373), "einsum  venv/torch/functional.py:373");
}
