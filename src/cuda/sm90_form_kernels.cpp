// The CUDA side of the form table (policy/sm90_forms.h): each form's kernels, defined by its
// kernel file. A new form is a kernel file, its row in sm90_forms.cpp and its row here.
#include "cuda/kernels/sm90_grouped_gemm.h"

#include "core/check.h"

namespace moe_ep::cuda {
namespace {
// A whole-layer form has no grouped GEMM kernels: its launches are the pipeline's own steps.
constexpr Sm90FormKernels kWholeLayerForm{};
}  // namespace


const Sm90FormKernels& sm90_form_kernels(Sm90Form form) {
  switch (form) {
    case Sm90Form::kMxfp4Decode: return kMxfp4DecodeKernels;
    case Sm90Form::kMxfp4DecodeSplit: return kMxfp4DecodeSplitKernels;
    case Sm90Form::kMxfp4DecodeWgmma: return kMxfp4DecodeWgmmaKernels;
    case Sm90Form::kMxfp4DecodeWgmmaSplit: return kMxfp4DecodeWgmmaSplitKernels;
    case Sm90Form::kMxfp4Mma: return kMxfp4MmaKernels;
    case Sm90Form::kMxfp4WgmmaFp8: return kMxfp4WgmmaFp8Kernels;
    case Sm90Form::kMxfp4RsFp8: return kMxfp4RsFp8Kernels;
    case Sm90Form::kMxfp4RsFp8Tails: return kMxfp4RsFp8TailsKernels;
    case Sm90Form::kMxfp4RsBf16Pairs: return kMxfp4RsBf16PairsKernels;
    case Sm90Form::kMxfp4OneToken: return kWholeLayerForm;  // its own launches (sm90_pipeline.cpp)
    case Sm90Form::kNvfp4Decode: return kNvfp4DecodeKernels;
    case Sm90Form::kNvfp4DecodeSplit: return kNvfp4DecodeSplitKernels;
    case Sm90Form::kNvfp4Mma: return kNvfp4MmaKernels;
    case Sm90Form::kNvfp4RsF16: return kNvfp4RsF16Kernels;
    case Sm90Form::kNvfp4RsF16Wide: return kNvfp4RsF16WideKernels;
  }
  MOE_EP_FAIL(ErrorCode::kInternal, "no kernels for form {}", static_cast<int>(form));
}

}  // namespace moe_ep::cuda
