"""gen_snapshot.py's stack frames: a pool of distinct (name, filename, line) frames shaped like
a real stacks='all' capture (about 85% C++), and the stack patterns drawn from it.
"""

CPP_TOP = [  # every allocation stack recorded with stacks='all' starts like this
    ("torch::unwind::unwind()", "??", 0),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??", 0),
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp", 0),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
     "CUDACachingAllocator.cpp", 0),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)",
     "", 0),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", "", 0),
]
CPP_BOTTOM = [
    ("PyEval_EvalCode", "??", 0),
    ("run_eval_code_obj", "??", 0),
    ("pyrun_file", "??", 0),
    ("_PyRun_SimpleFileObject", "??", 0),
    ("Py_RunMain", "??", 0),
    ("Py_BytesMain", "??", 0),
    ("__libc_start_main", "??", 0),
    ("_start", "??", 0),
]
OPS = ["add", "mul", "bmm", "mm", "addmm", "softmax", "gelu", "layer_norm", "embedding", "dropout",
       "cat", "view", "transpose", "contiguous", "sum", "mean", "div", "sub", "exp", "matmul",
       "einsum", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "copy_", "zeros", "empty"]
CPP_FILES = ["??", "??", "??", "", "RegisterCUDA.cpp", "VariableType_0.cpp", "VariableType_3.cpp",
             "RegisterCompositeImplicitAutograd.cpp", "python_torch_functions_0.cpp", "Linear.cpp",
             "python_variable_methods.cpp", "TensorIterator.cpp"]
PY_DIRS = ["/home/user/project/model", "/home/user/project/train",
           "/opt/conda/lib/python3.11/site-packages/torch/nn/modules",
           "/opt/conda/lib/python3.11/site-packages/torch/nn",
           "/opt/conda/lib/python3.11/site-packages/torch/optim",
           "/opt/conda/lib/python3.11/site-packages/torch/autograd",
           "/opt/conda/lib/python3.11/site-packages/einops"]
PY_FUNCS = ["forward", "_call_impl", "_wrapped_call_impl", "step", "backward", "attention", "mlp",
            "train_step", "main", "<module>", "_single_tensor_adamw", "wrapper", "einsum", "apply",
            "_engine_run_backward", "layer_norm", "linear", "embedding", "run_epoch", "compute_loss"]


def build_frames(rng, count):
    """Distinct (name, filename, line) triples; about 85% C++ like real files."""
    frames = list(CPP_TOP) + list(CPP_BOTTOM)
    seen = set(frames)
    while len(frames) < count:
        if rng.random() < 0.85:
            op = rng.choice(OPS)
            kind = rng.randrange(6)
            if kind == 0:
                name = f"at::_ops::{op}::call(at::Tensor const&, at::Tensor const&)"
            elif kind == 1:
                name = f"at::_ops::{op}::redispatch(c10::DispatchKeySet, at::Tensor const&)"
            elif kind == 2:
                name = f"at::native::{op}_out_cuda_{rng.randrange(40)}(at::Tensor const&, c10::ArrayRef<long>)"
            elif kind == 3:
                name = f"torch::autograd::VariableType::(anonymous namespace)::{op}(c10::DispatchKeySet, at::Tensor const&)"
            elif kind == 4:
                name = f"at::(anonymous namespace)::wrapper_CUDA_{op}_{rng.randrange(40)}(at::Tensor const&)"
            else:
                name = f"_PyEval_EvalFrameDefault.{rng.randrange(10**6)}"
            frame = (name, rng.choice(CPP_FILES), 0)
        else:
            frame = (rng.choice(PY_FUNCS), f"{rng.choice(PY_DIRS)}/m{rng.randrange(60)}.py", rng.randrange(1, 2500))
        if frame not in seen:
            seen.add(frame)
            frames.append(frame)
    return frames


def build_stacks(rng, n_frames, count, depth):
    """Stack patterns as tuples of frame indices, ~depth frames each.

    Top: the allocator entry frames; middle: random op/python frames from the
    pool; bottom: interpreter start-up frames, like a real stacks='all' trace.
    """
    top = tuple(range(len(CPP_TOP)))
    bottom = tuple(range(len(CPP_TOP), len(CPP_TOP) + len(CPP_BOTTOM)))
    first_free = len(CPP_TOP) + len(CPP_BOTTOM)
    middle_mean = max(1, depth - len(top) - len(bottom) // 2)
    stacks = []
    for _ in range(count):
        n_mid = max(1, int(rng.gauss(middle_mean, middle_mean / 3)))
        mid = tuple(rng.randrange(first_free, n_frames) for _ in range(n_mid))
        stacks.append(top + mid + bottom[rng.randrange(len(bottom)):])
    return stacks
