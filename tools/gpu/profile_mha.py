#!/usr/bin/env python3
"""Launches each attention kernel once per shape, for Nsight Compute to profile: ours (every fused row of the
head dim and the launcher's choice), torch SDPA flash (FA2) and cuDNN. Each launch sits inside an NVTX range
named after it, so `ncu --nvtx` reports say which candidate a kernel belongs to.

usage (on the GPU machine, tools/gpu/run_on_gpu.sh profile runs it):
  ncu --nvtx -k 'regex:flash|fmha|sdpa|cudnn' --section SpeedOfLight ... python3 tools/gpu/profile_mha.py --lib .bundle/libedgevit_mha_bench.so [--shape B H S D ...] [--rows REGEX]
--rows REGEX launches only the fused rows whose names match (the launcher's choice always runs).
"""
import argparse
import re

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_mha import load_lib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", type=int, nargs=4, action="append", metavar=("B", "H", "S", "D"))
    ap.add_argument("--rows", default="", help="only the fused rows whose names match this regex")
    args = ap.parse_args()
    shapes = args.shape or [(64, 12, 197, 64), (4, 16, 1025, 64)]
    lib = load_lib(args.lib)
    torch.manual_seed(0)
    for (B, H, S, D) in shapes:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.empty_like(q)
        scale = D ** -0.5
        stream = torch.cuda.current_stream().cuda_stream
        cands = [("ours", -1)] + [(lib.edgevit_mha_variant_name(i).decode(), i)
                                  for i in range(lib.edgevit_mha_variant_count())
                                  if lib.edgevit_mha_variant_head_dim(i) == D
                                  and re.search(args.rows, lib.edgevit_mha_variant_name(i).decode())]
        tag = f"B{B}_H{H}_S{S}_D{D}"
        for name, idx in cands:
            torch.cuda.nvtx.range_push(f"prof/{tag}/{name}")
            err = lib.edgevit_mha_fused_bhsd(B, H, S, S, D, scale, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                             o.data_ptr(), idx, stream)
            torch.cuda.nvtx.range_pop()
            if err != 0:
                raise SystemExit(f"{name}: cudaError {err}")
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel(backend):
                torch.cuda.nvtx.range_push(f"prof/{tag}/{name}")
                F.scaled_dot_product_attention(q, k, v, scale=scale)
                torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    print("profiled shapes:", shapes)


if __name__ == "__main__":
    main()
