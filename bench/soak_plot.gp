# soak_plot.gp - the soak's RSS and latency over time, from the files tests/stability/soak.py
# writes. Called by bench/soak.sh:  gnuplot -e "dir='RESULTS_DIR'; out='PLOT.png'" soak_plot.gp
load dir.'/plot.vars'
set terminal pngcairo size 1100,760 font "sans,10" noenhanced
set output out
set multiplot layout 2,1 title "animegan serve soak: ".label
set grid
set key below
set xlabel "time (min)"
set ylabel "MiB"
set title "server memory (sampled every second)"
set arrow 1 from warm_t/60, graph 0 to warm_t/60, graph 1 nohead dt 2 lc rgb "#888888"
set label 1 " end of warm-up" at warm_t/60, graph 0.95 left tc rgb "#666666"
set yrange [0:*]
plot dir.'/rss.dat' using ($1/60):2 with lines lw 1.5 lc rgb "#d04070" title "RSS", \
     '' using ($1/60):3 with lines lw 1.5 dt 3 lc rgb "#404040" title "peak RSS (VmHWM)", \
     dir.'/checkpoints.dat' using ($1/60):3 with points pt 9 ps 1.2 lc rgb "#208040" title "idle RSS at checkpoints", \
     base_hwm + tol with lines dt 2 lc rgb "#b0b0b0" title "pass limit (warm-up peak + tolerance)"
unset arrow 1
unset label 1
set title "request latency (each point a request; grey: 4xx by design)"
set ylabel "seconds"
set logscale y
set yrange [*:*]
plot dir.'/requests.dat' using ($1/60):($3==200 ? $2 : 1/0) with points pt 7 ps 0.25 lc rgb "#3070b0" title "200", \
     '' using ($1/60):($3!=200 ? $2 : 1/0) with points pt 7 ps 0.25 lc rgb "#a0a0a0" title "4xx"
unset multiplot
