# tamebpf build. Everything built lands in $(BUILD)/; `make V=1` shows commands.
#   make            build, and link the command into $(PREFIX)/bin
#   make compile    BPF objects, the C library and the testbed's link emulator
#   make deps       install Debian and Python dependencies (quick when present)
#   make test-deps  ... and what only the tests need (make test runs it)
#   make run        the main job (README)
#   make test       lint, type-check and the whole test suite (README, CI)
#   make bench      overhead benchmark -> docs/performance.md
#   make cap-pace-eval  pace-mode caps on the testbed, beside no cap -> docs/cap.md
#   make probetime  advise's probing time, fast start on and off -> docs/results/probetime.md
#   make testbed-accuracy  the WAN testbed's rate, RTT and queue accuracy -> docs/testbed.md
#   make install    DESTDIR/PREFIX-aware install of library and command (links nothing)
#   make deb        the Debian package, build/tamebpf_VERSION_ARCH.deb
#   make rpm        the RPM for EL9, build/rpm/RPMS/ARCH/tamebpf-VERSION-1.ARCH.rpm
#   make man        man pages and bash completion from the CLI -> build/man, build/completion

.DELETE_ON_ERROR:
.DEFAULT_GOAL := all

BUILD   ?= build
VENV    ?= .venv
PREFIX  ?= /usr/local
DESTDIR ?=
CLANG   ?= clang
CC      ?= cc
BPFTOOL ?= bpftool
LLVM_STRIP ?= llvm-strip
ARCH    := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
# Root is needed for BPF; as root (CI, these machines) run directly, else sudo.
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PY      := $(abspath $(VENV))/bin/python

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(BUILD)/%.bpf.o,$(BPF_SRCS))
BPF_SKELS := $(patsubst bpf/%.bpf.c,$(BUILD)/%.skel.h,$(BPF_SRCS))
BPF_HDRS  := $(wildcard bpf/*.h)
LIB_SRCS  := $(wildcard userspace/c/lib/*.c)
LIB_HDRS  := $(wildcard userspace/c/lib/*.h)
LIB       := $(BUILD)/libtamebpf.so
# Standalone C programs: userspace/c/tools/NAME.c -> $(BUILD)/NAME, linked with
# LDLIBS_NAME (set below per tool).
TOOL_SRCS := $(wildcard userspace/c/tools/*.c)
TOOLS     := $(patsubst userspace/c/tools/%.c,$(BUILD)/%,$(TOOL_SRCS))
LDLIBS_tamebpf-delayline := -lnetfilter_queue -lmnl

BPF_CFLAGS := -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_$(ARCH) \
              -I$(BUILD) -Ibpf
CFLAGS     ?= -O2 -g
LIB_CFLAGS := $(CFLAGS) -Wall -Wextra -Werror -fPIC -I$(BUILD) -Ibpf -Iuserspace/c/lib
LIB_LDLIBS := -lbpf -lelf -lz

.SECONDARY: $(BPF_OBJS)

.PHONY: all compile deps test-deps run test lint unit bench eval eval-fresh eval-fresh-staged eval-fresh-delivered eval-fresh-settled eval-fresh2-settled eval-fresh2-long eval-fresh-long eval-convergence eval-settled-design eval-trust eval-fresh3 eval-fresh4 cap-pace-eval cap-follow-eval probetime testbed-accuracy install deb rpm clean cmd man

# `make` also links the command onto PATH; every other target only builds, so
# running the tests or a benchmark leaves /usr/local/bin as it was.
all: compile cmd

compile: $(LIB) $(TOOLS)

deps:
	$(Q)scripts/install-deps

test-deps:
	$(Q)scripts/install-deps --test

$(BUILD):
	$(Q)mkdir -p $@

# vmlinux.h is generated from the running kernel's BTF rather than checked in:
# CO-RE relocations make the object portable, and the header always matches
# the kernel we test on (see docs/design.md).
$(BUILD)/vmlinux.h: | $(BUILD)
	$(call msg,BTF,$@)
	$(Q)test -r /sys/kernel/btf/vmlinux || { echo "no BTF at /sys/kernel/btf/vmlinux: tamebpf needs a kernel built with CONFIG_DEBUG_INFO_BTF=y" >&2; exit 1; }
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@

$(BUILD)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) $(BUILD)/vmlinux.h | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@
	$(Q)$(LLVM_STRIP) -g $@  # drop DWARF, keep BTF: the skeleton embeds the object

# Numbering probe connections and ACKs needs the value an atomic add returns
# (BPF v3 atomics, Linux 5.12 and later).
$(BUILD)/acktrain.bpf.o: BPF_CFLAGS += -mcpu=v3

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< > $@

$(LIB): $(LIB_SRCS) $(LIB_HDRS) $(BPF_SKELS) $(BPF_HDRS)
	$(call msg,LIB,$@)
	$(Q)$(CC) $(LIB_CFLAGS) -shared -o $@ $(LIB_SRCS) $(LIB_LDLIBS)

$(BUILD)/%: userspace/c/tools/%.c | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -Wall -Wextra -Werror -o $@ $< $(LDLIBS_$*)

# The command: the venv's entry point, linked onto PATH when we may write there.
cmd:
	$(Q)test -x $(VENV)/bin/tamebpf || { echo "no $(VENV)/bin/tamebpf: run 'make deps' first" >&2; exit 1; }
	$(Q)if [ -w $(PREFIX)/bin ]; then ln -sf $(abspath $(VENV))/bin/tamebpf $(PREFIX)/bin/tamebpf; \
	  else echo "note: $(PREFIX)/bin not writable; the command is $(abspath $(VENV))/bin/tamebpf"; fi

# The main job: the whole tool on a testbed of its own (scripts/demo.py).
run: deps compile
	$(SUDO) $(PY) scripts/demo.py

lint:
	$(Q)$(VENV)/bin/ruff check userspace tests scripts
	$(Q)$(VENV)/bin/mypy
	$(Q)cd userspace && ../$(VENV)/bin/lint-imports --config ../pyproject.toml

test: test-deps compile lint
	$(SUDO) $(PY) -m pytest -q -ra tests

unit: test-deps compile
	$(PY) -m pytest -q tests/unit

# Long measurements live here, not in the tests. Each script writes its own
# section of docs/performance.md.
bench: deps compile
	$(SUDO) $(PY) scripts/bench_overhead.py --write docs/performance.md
	$(Q)if [ -f scripts/bench_cap.py ]; then $(SUDO) $(PY) scripts/bench_cap.py --write docs/performance.md; fi
	$(SUDO) $(PY) scripts/bench_pace.py --write docs/performance.md
	$(SUDO) $(PY) scripts/bench_scale.py --write docs/performance.md

# Accuracy of the advisor on the WAN testbed. Each run writes its tables into
# its own file under docs/results/ (docs/accuracy.md, the summary, links them).
# The design cases -> docs/results/design-runs.md (about 4 min per case;
# EVAL_ARGS='--cross 0,2,8,30' gives the full design table).
eval: deps compile
	$(SUDO) $(PY) scripts/eval_advise.py --write docs/results/design-runs.md $(EVAL_ARGS)

# The 20 fresh cases drawn before their first run, scored on their own
# (about 100 min) -> docs/results/eval-fresh.json and run-fresh.md.
eval-fresh: deps compile
	$(SUDO) $(PY) scripts/eval_advise.py --set fresh --plans 2+2 --truth-window 5 \
		--rounds 3 --results docs/results/eval-fresh.json --write docs/results/run-fresh.md \
		--section eval_fresh --heading "Fresh cases, first run" $(EVAL_ARGS)

# The fresh cases' probes measured again, as stages of one test (2:2) beside
# two tests (2+2) in the same run, scored against the first run's ground
# truth (about 15 min) -> docs/results/eval-fresh-staged.json, run-fresh-staged.md.
eval-fresh-staged: deps compile
	test -e docs/results/eval-fresh-staged.json || \
		cp docs/results/eval-fresh.json docs/results/eval-fresh-staged.json
	$(SUDO) $(PY) scripts/eval_advise.py --set fresh --reprobe --plans 2+2 --plan 2:2 \
		--results docs/results/eval-fresh-staged.json --write docs/results/run-fresh-staged.md \
		--section eval_fresh_staged --heading "$(STAGED_HEADING)" $(EVAL_ARGS)
STAGED_HEADING = Fresh cases: probes as stages of one test (re-measured beside two tests; first-run ground truth)

# The fresh cases' default probes measured again with the goodput from
# segments delivered (ACKed or SACKed), scored against the first run's ground
# truth; each probe also keeps the bytes-acked goodput of the same window, so
# `--report --goodput-from acked` scores the very same probes the old way
# (about 12 min) -> docs/results/eval-fresh-delivered.json, run-fresh-delivered.md.
eval-fresh-delivered: deps compile
	test -e docs/results/eval-fresh-delivered.json || \
		cp docs/results/eval-fresh.json docs/results/eval-fresh-delivered.json
	$(SUDO) $(PY) scripts/eval_advise.py --set fresh --reprobe --plans 2:2 --plan 2:2 \
		--results docs/results/eval-fresh-delivered.json --write docs/results/run-fresh-delivered.md \
		--section eval_fresh_delivered --heading "$(DELIVERED_HEADING)" $(EVAL_ARGS)
DELIVERED_HEADING = Fresh cases: probe goodput from segments delivered (default probes re-measured; first-run ground truth)

# The fresh cases against a settled ground truth: 30 s of warm-up before each
# 30-s window (docs/results/ground-truth.md), at 1, 4
# and 16 streams and the advised count, 3 rounds. About 17 min a case, 6 h
# for all 20, so it keeps what earlier parts measured: run it in parts with
# EVAL_ARGS='--only fresh0', '--only fresh1', '--only fresh20'
# The advisor's probes (2-s stages) beside stages that run on, up to 4.5 s,
# until past start-up. EVAL_ARGS='--reprobe --only fresh20' measures a case's
# probes again and keeps its ground truth.
# -> docs/results/eval-fresh-settled.json, run-fresh-settled.md.
eval-fresh-settled: deps compile
	$(SUDO) $(PY) scripts/eval_advise.py --set fresh --append --plans 2:2,2:2~4.5 \
		--plan 2:2 \
		--truth-warmup 30 --truth-window 30 --rounds 3 --streams 1,4,16 \
		--results docs/results/eval-fresh-settled.json --write docs/results/run-fresh-settled.md \
		--section eval_fresh_settled --heading "Fresh cases against a settled ground truth" \
		$(EVAL_ARGS)

# The second fresh draw (--set fresh2), drawn after the first set was
# studied: the default probes beside 1 s + 3 s, 1 s + 4 s, 2 s + 10 s and the
# run-on stages, against the settled ground truth (about 16 min a case;
# EVAL_ARGS='--only fresh2-05')
# -> docs/results/eval-fresh2-settled.json, run-fresh2-settled.md.
eval-fresh2-settled: deps compile
	$(SUDO) $(PY) scripts/eval_advise.py --set fresh2 --append --plans 2:2,1:3,1:4,2:10,2:2~4.5 \
		--plan 2:2 \
		--truth-warmup 30 --truth-window 30 --rounds 3 --streams 1,4,16 \
		--results docs/results/eval-fresh2-settled.json --write docs/results/run-fresh2-settled.md \
		--section eval_fresh2_settled \
		--heading "Second fresh draw against a settled ground truth" $(EVAL_ARGS)

# Longer probes (option (a) of the decision issue 15 waits on): the default
# beside 5, 10 and 15 s stages, measured side by side on the loss-based
# cases of the second draw and scored against the settled ground truth
# eval-fresh2-settled measured (about 12 min)
# -> docs/results/eval-fresh2-long.json, run-fresh2-long.md.
# Probes only, each case's ground truth from --truth-from, every plan re-measured.
REPROBE = $(SUDO) $(PY) scripts/eval_advise.py --reprobe --plan 2:2

eval-fresh2-long: deps compile
	$(REPROBE) --set fresh2 --truth-from docs/results/eval-fresh2-settled.json \
		--plans 2:2,5:5,10:10,15:15 --results docs/results/eval-fresh2-long.json \
		--write docs/results/run-fresh2-long.md --section eval_fresh2_long \
		--heading "Second fresh draw: longer probes against the settled ground truth" $(EVAL_ARGS)

# The same longer probes on the first draw's 15 loss-based cases, against
# the settled truth eval-fresh-settled measured (about 20 min; the rule the
# result applies: docs/results/fresh-long-decision-rules.md)
# -> docs/results/eval-fresh-long.json, run-fresh-long.md.
eval-fresh-long: deps compile
	$(REPROBE) --set fresh --truth-from docs/results/eval-fresh-settled.json \
		--plans 2:2,10:10,15:15 --results docs/results/eval-fresh-long.json \
		--write docs/results/run-fresh-long.md --section eval_fresh_long \
		--heading "First fresh draw: longer probes against the settled ground truth" $(EVAL_ARGS)

# How long a probe must run before its share of a shared path is the long
# run's: 10 streams for a minute on each loss-based case of the second fresh
# draw (about 10 min) -> docs/results/convergence.json, run-convergence.md.
eval-convergence: deps compile
	$(SUDO) $(PY) scripts/eval_convergence.py --write docs/results/run-convergence.md $(CONVERGENCE_ARGS)

# The default stop rule's design study (issue 29): every candidate rule on
# the same 15 s + 15 s probes of the earlier draws' 22 loss-based cases,
# against their settled truth (about 40 min; EVAL_ARGS=--report re-scores)
# -> docs/results/settled-design.json.gz, settled-design.md.
eval-settled-design: deps compile
	$(SUDO) $(PY) scripts/eval_settled.py --write docs/results/settled-design.md $(EVAL_ARGS)

# When to trust the ACK-spacing capacity: the large-band rule re-read on the
# earlier draws' probes (seconds, no kernel) -> docs/results/settled-design.md.
eval-trust:
	$(PY) scripts/eval_trust.py --write docs/results/settled-design.md

# Issue 29's fresh draw: the settled default and --quick against a settled
# truth, 18 loss-based and 6 BBR cases (about 8 min a case, resumable: the
# cases measured are kept; EVAL_ARGS=--report re-scores, --only KEY picks)
# -> docs/results/eval-fresh3.json, run-fresh3.md (docs/accuracy.md's table).
eval-fresh3: deps compile
	$(SUDO) $(PY) scripts/eval_fresh_draw.py --draw fresh3 --write docs/results/run-fresh3.md $(EVAL_ARGS)

# The draw that replaced it after the capacity trust rule changed (make
# eval-trust); the same measurement, a new seed
# -> docs/results/eval-fresh4.json, run-fresh4.md.
eval-fresh4: deps compile
	$(SUDO) $(PY) scripts/eval_fresh_draw.py --draw fresh4 --write docs/results/run-fresh4.md $(EVAL_ARGS)

# Pace-mode caps on the testbed beside no cap (issue 16) -> docs/cap.md (~3 min).
cap-pace-eval: deps compile
	$(SUDO) $(PY) scripts/cap_pace_eval.py --write docs/cap.md $(CAP_PACE_ARGS)

# A pace cap that follows its path beside one that does not, while the cross
# traffic goes 8 -> 2 -> 8 flows (issue 32; ~20 min) -> docs/cap.md,
# docs/results/cap-follow.json.
cap-follow-eval: deps compile
	$(SUDO) $(PY) scripts/eval_follow.py --write docs/cap.md $(EVAL_ARGS)

probetime: deps compile
	$(SUDO) $(PY) scripts/bench_probetime.py --write docs/results/probetime.md $(PROBETIME_ARGS)

# The testbed's own accuracy (rate, RTT, queue) -> docs/testbed.md (~12 min).
testbed-accuracy: deps compile
	$(SUDO) $(PY) scripts/testbed_accuracy.py --write docs/testbed.md $(TESTBED_ARGS)

# A self-contained install: the library and the Python package under
# PREFIX/lib/tamebpf, the command in PREFIX/bin, run by the system's Python
# (which needs python3-prometheus-client). Honours DESTDIR; links nothing.
# The launcher tries SYS_PYTHON first, then any python3.11 or later on PATH.
# PKGLIBDIR is /usr/lib64/tamebpf in the RPM (EL's place for 64-bit libraries).
SYS_PYTHON ?= /usr/bin/python3
PKGLIBDIR  ?= $(PREFIX)/lib/tamebpf
install: compile
	install -d $(DESTDIR)$(PKGLIBDIR)/python $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(LIB) $(DESTDIR)$(PKGLIBDIR)/
	tar -C userspace --exclude=__pycache__ -cf - tamebpf | tar -C $(DESTDIR)$(PKGLIBDIR)/python -xf -
	sed -e 's#@PYTHON@#$(SYS_PYTHON)#' -e 's#@LIBDIR@#$(PKGLIBDIR)#' \
	  scripts/tamebpf.launcher > $(DESTDIR)$(PREFIX)/bin/tamebpf
	chmod 0755 $(DESTDIR)$(PREFIX)/bin/tamebpf

# The Debian package: build/tamebpf_VERSION_ARCH.deb (scripts/build-deb).
deb: compile man
	$(Q)BUILD=$(BUILD) scripts/build-deb

# The RPM for EL9: build/rpm/RPMS/ARCH/tamebpf-VERSION-1.ARCH.rpm, built with
# rpmbuild from packaging/rpm/tamebpf.spec (scripts/build-rpm; docs/deploy.md
# says what of it is verified here).
rpm: compile man
	$(Q)BUILD=$(BUILD) scripts/build-rpm

# Man pages (section 1, one per command and sub-command) and the bash
# completion file, generated from the argparse parser (scripts/gen_man.py).
man:
	$(call msg,MAN,$(BUILD)/man $(BUILD)/completion)
	$(Q)PYTHONPATH=userspace $(PY) scripts/gen_man.py --man $(BUILD)/man \
	  --completion $(BUILD)/completion >/dev/null

clean:
	rm -rf $(BUILD)
