# CI's CPU accounting, sourced by .ci/run and .ci/python_matrix.sh (docs/benchmarks.md, "CI's steps").
# Seconds of CPU, as integers; "" where this machine cannot tell.

# Both cores, busy (user, nice, system, irq, softirq, steal) since boot.
machine_cpu_s() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{printf "%d\n", ($2+$3+$4+$7+$8+$9)/hz; exit}' /proc/stat; }

# Docker's share of it: every container's CPU (their cgroup keeps what ended containers used:
# the images' suites, the builds' RUN steps, the e2e container) plus the daemons' own (dockerd
# and containerd commit the image layers).
docker_cpu_s() {
  local ns="" daemons=0 pid f
  for f in /sys/fs/cgroup/cpuacct/docker/cpuacct.usage /sys/fs/cgroup/docker/cpu.stat; do
    [[ -r $f ]] || continue
    if [[ $f == *cpu.stat ]]; then ns=$(awk '/^usage_usec/{print $2 * 1000}' "$f"); else ns=$(<"$f"); fi
    break
  done
  [[ -n $ns ]] || return 0
  for pid in $(pgrep -x dockerd) $(pgrep -x containerd); do
    daemons=$((daemons + $(awk '{print $14+$15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo $(( ns / 1000000000 + daemons / $(getconf CLK_TCK) ))
}
