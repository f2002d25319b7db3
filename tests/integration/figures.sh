# Sourced by lib.sh: figures from hydro's log lines ("who[pid] HH:MM:SS.mmm: message").
# ms_between FILE REGEX_A REGEX_B: milliseconds from the last line matching A to the first line
# after it matching B.
ms_between() {
  awk -v a="$2" -v b="$3" '
    function ms(line,   t, p) {
      if (!match(line, /[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9][0-9][0-9]/)) return -1
      t = substr(line, RSTART, RLENGTH); split(t, p, /[:.]/)
      return ((p[1] * 60 + p[2]) * 60 + p[3]) * 1000 + p[4]
    }
    { lines[NR] = $0 }
    $0 ~ a { from = NR }
    END {
      if (!from) { print "?"; exit }
      for (i = from + 1; i <= NR; i++) if (lines[i] ~ b) { d = ms(lines[i]) - ms(lines[from]); if (d < 0) d += 86400000; print d; exit }
      print "?"
    }' "$1"
}

# report_figure LINE: prints a figure line, and appends it to $HYDRO_FIGURES when set.
report_figure() {
  echo "$1"
  [ -z "${HYDRO_FIGURES:-}" ] || echo "$1" >>"$HYDRO_FIGURES"
}

# report_path NAME LOG SIGNAL_REGEX: prints the figures for one Slurm path from the job's log:
# the steps lost (the step the exit checkpoint holds minus the step the restart resumed at), the
# time from the signal to the committed checkpoint, and from hydro-launch's start in the
# restarted job to its first training step. Appends them to $HYDRO_FIGURES when set.
report_path() {
  local name=$1 log=$2 sig=$3 ck resumed lost commit restart
  ck=$({ grep -oP 'checkpoint of step \K[0-9]+(?= committed.*exiting)' "$log" || true; } | tail -1)
  resumed=$({ grep -oP 'resumed from .* at step \K[0-9]+' "$log" || true; } | tail -1)
  lost=$(( ${ck:-0} - ${resumed:-0} ))
  commit=$(ms_between "$log" "$sig" 'checkpoint of step [0-9]+ committed')
  restart=$(ms_between "$log" 'hydro-launch\[[0-9]+\] .*resuming from step' 'first step done')
  report_figure "FIGURE path=$name steps_lost=$lost signal_to_commit_ms=$commit restart_to_first_step_ms=$restart"
}
