#!/bin/bash
# The machine's CPU (/proc/stat) and the trainer's and worker's (their stat) over 4 s of steady state
# of a testbed run. Usage: SCENARIO=long.yaml st.sh   (OUT, BIN, POL optional)
OUT=${OUT:-/tmp/pf/st}
. "$(dirname "$0")/testbed-run.sh"
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
head -1 /proc/stat > $OUT/s0; p0=$(cpu $P); w0=$(cpu $W); sleep 4; head -1 /proc/stat > $OUT/s1; p1=$(cpu $P); w1=$(cpu $W)
echo "trainer $(( (p1-p0) )) worker $(( (w1-w0) )) ticks (100/s) over 4 s"
paste $OUT/s0 $OUT/s1 | awk '{n=NF/2; split("user nice system idle iowait irq softirq steal",nm," "); for(i=2;i<=9;i++) printf "%s %.2f  ", nm[i-1], ($(i+n)-$i)/400; print ""}'
wait $B; tail -1 $OUT/log
