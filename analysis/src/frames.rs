//! What a stack frame's file says: the program's own code, code `torch.compile` generated, or a
//! library's. Used by the sites, the stacks shown and the stack rules alike (no other module of
//! the analysis is needed for it).

/// Python files that `torch.compile` wrote: FX's generated graph code and Inductor's output.
pub fn is_generated_code(file: &str) -> bool {
    let name = file.rsplit(['/', '\\']).next().unwrap_or(file);
    name.starts_with("fx_generated_") || file.contains("/torchinductor_") || file.contains("\\torchinductor_")
}

/// Whether a source file is the program's own: a Python file that is not PyTorch's, not an
/// installed package's (`site-packages`, `dist-packages`), not the standard library's and not
/// code `torch.compile` wrote. What a user can change is there.
pub fn is_program_file(file: &str) -> bool {
    let path = file.replace('\\', "/");
    let lower = path.to_ascii_lowercase();
    if !lower.ends_with(".py") || is_generated_code(&path) {
        return false;
    }
    let library = ["/site-packages/", "/dist-packages/", "/lib/python", "/lib64/python"];
    // A Windows install keeps its standard library in `Lib`: `C:\Python311\Lib\runpy.py`.
    let windows = file.contains('\\') || lower.get(1..3) == Some(":/");
    !(library.iter().any(|l| lower.contains(l))
        || lower.starts_with("torch/")
        || lower.contains("/torch/")
        || lower.starts_with("<frozen")
        || (windows && lower.contains("/lib/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_files_are_told_from_the_libraries() {
        for program in [
            "/home/user/llm/model.py",
            "train.py",
            "C:\\Users\\me\\proj\\train.py",
            "/tmp/ipykernel_4242/3912.py",
            "/workspace/src/my_torch_utils.py",
        ] {
            assert!(is_program_file(program), "{program}");
        }
        for library in [
            "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/linear.py",
            "/usr/local/lib/python3.10/dist-packages/transformers/models/gpt2/modeling_gpt2.py",
            "/usr/lib/python3.11/threading.py",
            "torch/nn/functional.py",
            "/home/user/src/pytorch/torch/nn/functional.py",
            "C:\\Python311\\Lib\\runpy.py",
            "C:\\Users\\me\\venv\\Lib\\site-packages\\torch\\functional.py",
            "<frozen runpy>",
            "/tmp/torchinductor_me/ab/cabc.py",
            "/home/user/llm/model.cpp",
            "??",
        ] {
            assert!(!is_program_file(library), "{library}");
        }
    }
}
