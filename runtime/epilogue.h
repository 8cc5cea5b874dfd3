// Op::epilogue (runtime/graph.h) as the kernels' Epilogue (kernels/cpu/kernels.h): one mapping for every row
// that hands a linear op's epilogue to a float kernel (the CPU rows, the twin rows, the op cases).
#pragma once

#include "kernels/cpu/kernels.h"

namespace edgevit {

// 0 bias, 1 erf GELU, 2 residual add, 3 tanh GELU, 4 QuickGELU, 5 tanh.
inline Epilogue epilogue_of(int op_epilogue) {
  switch (op_epilogue) {
    case 1: return Epilogue::kGelu;
    case 2: return Epilogue::kResidualAdd;
    case 3: return Epilogue::kGeluTanh;
    case 4: return Epilogue::kQuickGelu;
    case 5: return Epilogue::kTanh;
    default: return Epilogue::kNone;
  }
}

}  // namespace edgevit
