#!/usr/bin/env python3
"""CPU emulation of topk-register-warp-ranking.patch's selection (not the kernel): the register selector's fine
bins (kernels/topk_selector_bins.cuh), the threshold bin's keys ranked by (key, lower column first), and the
winners' predicate, against an exact top-k with ties to the lower column. Then the share of rows that take
the ranking (threshold bin of more keys than needed, at most 64).

    python3 docs/next-run/emulate_warp_ranking.py
"""
# Emulates the register selector's new path (fine bins -> threshold bin -> warp ranking) and checks the
# selected set against an exact top-k with ties to the lower column.
import numpy as np
rng=np.random.default_rng(1)
kFineShift=18; kFineLowest=(95<<3)<<2
def fine_bin(bits):
    mag=bits & 0x7fffffff
    code=mag>>kFineShift
    m=np.where(code<=kFineLowest,0,np.minimum(code-kFineLowest,2047)).astype(np.int64)
    neg=(bits>0x80000000)
    return np.where(neg, 2048+m, 2047-m)
def key(x):
    b=(x+np.float32(0)).view(np.uint32).astype(np.uint64)
    return np.where(b>>31, b ^ 0xffffffff, b ^ 0x80000000).astype(np.uint64)
stats={'ranked':0,'digit':0,'allin':0,'bad':0}
for trial in range(3000):
    L=int(rng.choice([8192,4096,16384,6000,2049]))
    kind=trial%4
    x=rng.standard_normal(L).astype(np.float32)
    if kind==1: x=np.maximum(x,0)*3+np.float32(0.25)*rng.standard_normal(L).astype(np.float32)
    if kind==2: x=np.round(x*4).astype(np.float32)/4   # many ties
    if kind==3: x[rng.integers(0,L,50)]=np.nan
    k=int(rng.choice([2048,512,1024,7]))
    bits=x.view(np.uint32).astype(np.int64)
    nan=np.isnan(x)
    fb=fine_bin(bits); fb[nan]=4096
    counts=np.bincount(fb,minlength=4097)[:4096]
    cum=np.cumsum(counts)
    if cum[-1] < k: stats['allin']+=1; continue
    b=int(np.searchsorted(cum,k))  # first bin with cum>=k
    above=int(cum[b]-counts[b]); need=k-above; cnt=int(counts[b])
    if not (cnt>need and cnt<=64):
        stats['digit' if cnt>need else 'allin']+=1; continue
    stats['ranked']+=1
    K=key(x)
    idx=np.nonzero(fb==b)[0]
    assert len(idx)==cnt
    ck=K[idx]; cc=idx
    rank=np.array([np.sum((ck>ck[i])|((ck==ck[i])&(cc<cc[i]))) for i in range(cnt)])
    t=np.nonzero(rank==need-1)[0]; assert len(t)==1; tk=ck[t[0]]; tc=cc[t[0]]
    col=np.arange(L)
    win=(~nan)&((K>tk)|((K==tk)&(col<=tc)))
    # exact: sort by (value desc, column asc), NaN excluded
    order=sorted([i for i in range(L) if not nan[i]], key=lambda i:(-float(x[i]), i))[:k]
    if set(order)!=set(np.nonzero(win)[0].tolist()): stats['bad']+=1
print(stats)
for kind in ('randn','relu'):
  for L in (8192,16384):
    r=d=0
    for t in range(300):
        x=rng.standard_normal(L).astype(np.float32)
        if kind=='relu': x=np.maximum(x,0)*3+np.float32(0.25)*rng.standard_normal(L).astype(np.float32)
        fb=fine_bin(x.view(np.uint32).astype(np.int64)); counts=np.bincount(fb,minlength=4096); cum=np.cumsum(counts)
        b=int(np.searchsorted(cum,2048)); need=2048-int(cum[b]-counts[b]); cnt=int(counts[b])
        if cnt>need and cnt<=64: r+=1
        elif cnt>need: d+=1
    print(kind,L,'ranked',r/300,'digit',d/300)
