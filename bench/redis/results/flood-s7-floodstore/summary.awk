# summary.awk: see ab.sh.
/^# round/ { r = $3; t = $5 }
/^BenchmarkFlood/ {
	split($1, p, "/"); s = p[2]
	for (i = 3; i < NF; i += 2) { if ($(i+1) == "decisions/s") d[r, t, s] = $i; if ($(i+1) == "cpu-ns/decision") c[r, t, s] = $i }
	if (r > R) R = r
}
END {
	printf "round | base memory | base redis-local | base ratio | base cpu mem/redis | new memory | new redis-local | new ratio | new cpu mem/redis\n"
	for (i = 1; i <= R; i++) {
		bm = d[i, "base", "store=memory"]; bl = d[i, "base", "store=redis-local"]
		nm = d[i, "new", "store=memory"]; nl = d[i, "new", "store=redis-local"]
		printf "%d | %.2fM | %.2fM | %.2f | %.2f | %.2fM | %.2fM | %.2f | %.2f\n", i, bm/1e6, bl/1e6, bl/bm, c[i,"base","store=memory"]/c[i,"base","store=redis-local"], nm/1e6, nl/1e6, nl/nm, c[i,"new","store=memory"]/c[i,"new","store=redis-local"]
	}
}
