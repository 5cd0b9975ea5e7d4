"""New build against old over the rounds of ab.sh: each sluice run (cold, then two from the
metric store) new / old in its round, and how many all-local checks each ran."""
import json, os, statistics, sys
root = sys.argv[1]
rounds = sorted({d.split('-')[1] for d in os.listdir(root) if d.startswith(('new-', 'old-')) and os.path.isdir(os.path.join(root, d))})
names = sorted({f for d in os.listdir(root) if d.startswith('new-') and os.path.isdir(os.path.join(root, d)) for f in os.listdir(os.path.join(root, d))})
def load(b, r, n):
    p = os.path.join(root, f'{b}-{r}', n)
    return json.load(open(p)) if os.path.exists(p) else None
def checks(v):
    tl = v.get('timeline', [])
    return sum('as a check' in e['reason'] for e in tl)
allr = []
print('| scenario | run | new / old per round | checks new, old |')
print('|---|---|---|---|')
for n in names:
    for k in ['sluice', 'sluice#2', 'sluice#3']:
        ratios, cn, co = [], 0, 0
        for r in rounds:
            a, b = load('new', r, n), load('old', r, n)
            if not a or not b or k not in a['policies'] or k not in b['policies']: continue
            ratios.append(a['policies'][k]['samples_per_s'] / b['policies'][k]['samples_per_s'])
            cn += checks(a['policies'][k]); co += checks(b['policies'][k])
        allr += ratios
        print(f"| {n[:-5]} | {k} | {', '.join(f'{x:.3f}' for x in ratios)} | {cn}, {co} |")
print(f"\nall pairs: median new/old {statistics.median(allr):.3f} over {len(allr)}")
