// What torch.compile's generated code looks like on the stack, shared by the compiled training step
// (synth_compiled.cpp) and the CUDA-graph decode (synth_cudagraphs.cpp); see synth_compiled.cpp's
// head for what the real stack does.
#pragma once

#include "core/synth/synth_recorder.h"

#include <string>

namespace poolscope::synth_detail::inductor {

// The generated modules: /tmp/torchinductor_<user>/<first two characters of the hash>/c<hash>.py.
inline const std::string kInductorDir = "/tmp/torchinductor_alice/";
inline const std::string kFwModule = kInductorDir + "q7/cq7rbtuq3slkzv2pk5tymhxu5c2kbyk6m4wfq6lbx3z4fkhgyg3j.py";
inline const std::string kBwModule = kInductorDir + "tn/ctnd2opkfnfzz6v4rgjzz6gqrmlg6rklbn5uvd6f3v2zoqh4bgcf.py";
inline const std::string kDecodeModule = kInductorDir + "x3/cx3hk2w7d6cynbqlg5q5vbdpw3t4yhxg2ojmqk7ca3mzghsrkmgd.py";

inline const std::string kAot = kTorch + "_functorch/_aot_autograd/";

// output_code.CompiledFxGraph.__call__ -> utils.align_inputs_from_check_idxs' run -> the module's call.
inline Frames compiledGraph(const std::string& module, int line)
{
    return Frames{{module, "call", line}, {kTorch + "_inductor/output_code.py", "__call__", 464}, {kTorch + "_inductor/utils.py", "run", 2162}};
}

// empty_strided_cuda as the generated code calls it, with the allocator's C++ frames inside.
inline const Frames kEmptyStrided = kCppAlloc + Frames{{"??", "torch::dynamo::(anonymous namespace)::_empty_strided_cuda(_object*, _object*)", 0}};
// An ATen fallback called through OpOverload.__call__: the operator allocates its outputs.
inline Frames atenFallback(const std::string& kernel)
{
    return kCppAlloc + Frames{{"??", kernel, 0}, {"??", "torch::jit::invokeOperatorFromPython(...)", 0}, {kTorch + "_ops.py", "__call__", 716}};
}
inline const Frames kCublas = kCppAlloc + Frames{{"??", "at::cuda::getCurrentCUDABlasHandle()", 0},
                                          {"??", "at::cuda::blas::gemm<c10::BFloat16>(char, char, long, long, long, ...)", 0},
                                          {"??", "at::native::structured_mm_out_cuda::impl(at::Tensor const&, at::Tensor const&, at::Tensor const&)", 0},
                                          {"??", "torch::autograd::THPVariable_mm(_object*, _object*, _object*)", 0}};

} // namespace poolscope::synth_detail::inductor
