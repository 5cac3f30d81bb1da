# Sourced by bench scripts. `wire_bytes PID HOST:PORT`: TCP payload bytes (acknowledged
# sent plus received, from `ss -tin`) on process PID's connections to HOST:PORT.
wire_bytes() {
  ss -tinpH "dst $2" 2>/dev/null | python3 -c '
import re, sys
pid, total, own = sys.argv[1], 0, False
for line in sys.stdin:
    if "users:" in line:
        own = ("pid=%s," % pid) in line
    if own:
        for k in ("bytes_acked", "bytes_received"):
            m = re.search(k + r":(\d+)", line)
            if m:
                total += int(m.group(1))
print(total)' "$1"
}
