# Per-instruction warp-stall samples from the profiler's source page (ncu -i REPORT --page source --csv
# --print-source sass): python3 stalls.py source.csv [top-count]. The page lists each kernel twice.
import csv, sys
lines=open(sys.argv[1]).read().split('\n')
starts=[i for i,l in enumerate(lines) if l.startswith('"Kernel Name"')]+[len(lines)]
for si in range(len(starts)-1):
    block=lines[starts[si]:starts[si+1]]
    name=block[0]
    rows=list(csv.reader(block[1:]))
    h=rows[0]; data=[dict(zip(h,r)) for r in rows[1:] if len(r)==len(h)]
    stall_cols=[c for c in h if c.startswith('stall_') and '(Not Issued)' not in c]
    def f(x):
        try: return float(x)
        except: return 0.0
    total=sum(f(d['Warp Stall Sampling (All Samples)']) for d in data)
    print('== section',si, 'form', name.split('ParkedForm)')[1][:1], 'instructions',len(data),'samples',total, 'first addr', data[0]['Address'] if data else None)
    agg={c:sum(f(d[c]) for d in data) for c in stall_cols}
    print('   by reason:', ', '.join('%s %.1f%%'%(c[6:],100*v/total) for c,v in sorted(agg.items(),key=lambda x:-x[1])[:8] if total))
    top=sorted(data,key=lambda d:-f(d['Warp Stall Sampling (All Samples)']))[:int(sys.argv[2]) if len(sys.argv)>2 else 18]
    for d in top:
        s=f(d['Warp Stall Sampling (All Samples)'])
        reasons=sorted(((c[6:],f(d[c])) for c in stall_cols),key=lambda x:-x[1])[:3]
        print('   %5.1f%% %s %-60s %s'%(100*s/total, d['Address'], d['Source'][:60], ' '.join('%s:%.0f%%'%(r,100*v/s) for r,v in reasons if v>0)))
