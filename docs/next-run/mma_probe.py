"""FP8 dense MMA rate of this GPU now: torch._scaled_mm 8192^3 (E4M3 x E4M3 -> BF16), CUDA events, median."""
import torch
n = 8192
a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
one = torch.tensor(1.0, device="cuda")
f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
for _ in range(20): f()
ts = []
for _ in range(50):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e-3)
ts.sort(); t = ts[len(ts) // 2]
print(f"fp8 mma probe: {2 * n**3 / t / 1e12:.0f} TFLOP/s (median of 50, {t * 1e6:.0f} us)")
