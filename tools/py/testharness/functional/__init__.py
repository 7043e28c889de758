"""Selection of functional scripts by what they reached (`run_all.sh --affected`).

A functional script that passes records what it reached (functional/reach.py): the
functions of the source packages its driver and every Ray worker executed (coverage, per
function), the repository files its driver read (the probe), and the state of every
repository file when it started. `affected` (select.py, pure) judges each script against
an edit: since its last passing run, or since a git revision. The adapters: tree.py (git),
store.py (the reach file), probe.py (the driver), cli.py (`testharness functional`).
"""
