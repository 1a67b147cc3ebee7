# tamebpf build. Everything built lands in $(BUILD)/; `make V=1` shows commands.
#   make            build, and link the command into $(PREFIX)/bin
#   make compile    BPF objects, the C library and the testbed's link emulator
#   make deps       install Debian and Python dependencies (quick when present)
#   make test-deps  ... and what only the tests need (make test runs it)
#   make run        the main job (README)
#   make test       lint, type-check and the whole test suite (README, CI)
#   make test-long  the kernel tests that measure for minutes in all (marker "long")
#   make bench      overhead benchmarks (userspace/tamebpf_bench) -> docs/performance.md
#   make eval [PRESET=NAME]  one evaluation, by default the current method
#               (make eval-list: the presets) -> docs/
#   make install    DESTDIR/PREFIX-aware install of library and command (links nothing)
#   make install-system  ... and the units, site configuration, contrib/, man pages
#   make deb        the Debian package (debian/, dpkg-buildpackage) -> build/deb/
#   make srpm       the EL9 source RPM (packaging/rpm/tamebpf.spec) -> build/rpm/SRPMS/
#   make rpm        the EL9 RPM, rebuilt from that SRPM -> build/rpm/RPMS/ARCH/
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
# A module of this checkout's userspace/ (the eval and bench tooling, the demo).
EVALPY  := env PYTHONPATH=$(abspath userspace) $(PY) -m

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

.PHONY: all compile deps test-deps run test lint unit test-long bench eval eval-list cap-pace-eval cap-follow-eval testbed-accuracy install install-system deb srpm rpm clean cmd man

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

# CPPFLAGS and LDFLAGS are the packagers' (dpkg-buildflags, rpm's
# %{build_ldflags}): hardening such as _FORTIFY_SOURCE and -z relro -z now.
$(LIB): $(LIB_SRCS) $(LIB_HDRS) $(BPF_SKELS) $(BPF_HDRS)
	$(call msg,LIB,$@)
	$(Q)$(CC) $(CPPFLAGS) $(LIB_CFLAGS) $(LDFLAGS) -shared -o $@ $(LIB_SRCS) $(LIB_LDLIBS)

$(BUILD)/%: userspace/c/tools/%.c | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -Wall -Wextra -Werror -o $@ $< $(LDLIBS_$*)

# The command: the venv's entry point, linked onto PATH when we may write there.
cmd:
	$(Q)test -x $(VENV)/bin/tamebpf || { echo "no $(VENV)/bin/tamebpf: run 'make deps' first" >&2; exit 1; }
	$(Q)if [ -w $(PREFIX)/bin ]; then ln -sf $(abspath $(VENV))/bin/tamebpf $(PREFIX)/bin/tamebpf; \
	  else echo "note: $(PREFIX)/bin not writable; the command is $(abspath $(VENV))/bin/tamebpf"; fi

# The main job: the whole tool on a testbed of its own (tamebpf_eval/demo.py).
run: deps compile
	$(SUDO) $(EVALPY) tamebpf_eval.demo

lint:
	$(Q)$(VENV)/bin/ruff check userspace tests scripts
	$(Q)$(VENV)/bin/mypy
	$(Q)cd userspace && ../$(VENV)/bin/lint-imports --config ../pyproject.toml

# The unit tests are pure: pytest-xdist runs them on both cores, the
# packaging tests beside them (they mostly wait for one build at a time).
# The kernel tests share the machine's cgroups and namespaces and measure
# rates and times, so they run one at a time, alone, after
# (scripts/test-suite says why). Before them, compile and lint side by side
# (a compiler and mypy: a core each).
test: test-deps
	$(Q)$(MAKE) --no-print-directory -j2 compile lint
	$(SUDO) scripts/test-suite $(PY)

unit: test-deps compile
	$(PY) -m pytest -q -n 2 tests/unit

# The kernel tests that measure for 20 s or more and check a number (marker
# "long"): run before a change to advice, learning or following lands.
test-long: test-deps compile
	$(SUDO) $(PY) -m pytest -q -ra --durations=10 -m long tests/integration

# Long measurements live here, not in the tests: the benchmarks in
# userspace/tamebpf_bench, the accuracy harness in userspace/tamebpf_eval
# (both beside tamebpf, not in the product's install), run with this
# checkout's userspace first on the path (EVALPY). Each writes its own
# section of a document under docs/.

bench: deps compile
	$(SUDO) $(EVALPY) tamebpf_bench.bench_overhead --write docs/performance.md
	$(SUDO) $(EVALPY) tamebpf_bench.bench_overhead --arm acks --pin 0,1 --reps 15 --write docs/performance.md
	$(SUDO) $(EVALPY) tamebpf_bench.bench_overhead --arm pace --direction receive --pin 0,1 --toggle --reps 10 --seconds 8 --write docs/performance.md
	$(SUDO) $(EVALPY) tamebpf_bench.bench_cap --write docs/performance.md
	$(SUDO) $(EVALPY) tamebpf_bench.bench_pace --write docs/performance.md
	$(SUDO) $(EVALPY) tamebpf_bench.bench_scale --write docs/performance.md
	$(SUDO) $(EVALPY) tamebpf_bench.bench_slow_clients --write docs/metrics.md

# The evaluations: `make eval PRESET=NAME` runs the preset NAME of
# userspace/tamebpf_eval/presets.toml (a module, its arguments, what it
# writes; `make eval-list` prints them). EVAL_ARGS go last: EVAL_ARGS=--report
# re-scores the stored results without measuring, EVAL_ARGS='--only KEY'
# picks cases. `make eval` alone runs the current method (PRESET=current:
# the first preset, the newest fresh draw); `make eval-NAME` is PRESET=NAME
# (the names the docs' run records use).
PRESET ?= current
eval: deps $(if $(filter list,$(PRESET)),,compile)
	$(SUDO) $(EVALPY) tamebpf_eval.presets $(PRESET) $(EVAL_ARGS)

eval-list:
	$(Q)$(EVALPY) tamebpf_eval.presets list

eval-%:
	$(Q)$(MAKE) --no-print-directory eval PRESET=$*

cap-pace-eval cap-follow-eval:
	$(Q)$(MAKE) --no-print-directory eval PRESET=$(@:-eval=)

testbed-accuracy:
	$(Q)$(MAKE) --no-print-directory eval PRESET=$@

# A self-contained install: the library and the Python package under
# PREFIX/lib/tamebpf, the command in PREFIX/bin, run by the system's Python
# (which needs python3-prometheus-client). Honours DESTDIR; links nothing.
# The launcher tries SYS_PYTHON first, then any python3.11 or later on PATH.
# PKGLIBDIR is /usr/lib64/tamebpf in the RPM (EL's place for 64-bit libraries).
# The testbed (a program of its own, which the command never imports) is
# not installed.
SYS_PYTHON ?= /usr/bin/python3
PKGLIBDIR  ?= $(PREFIX)/lib/tamebpf
install: $(LIB)
	install -d $(DESTDIR)$(PKGLIBDIR)/python $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(LIB) $(DESTDIR)$(PKGLIBDIR)/
	tar -C userspace --exclude=__pycache__ -cf - tamebpf | \
	  tar -C $(DESTDIR)$(PKGLIBDIR)/python -xf -
	sed -e 's#@PYTHON@#$(SYS_PYTHON)#' -e 's#@LIBDIR@#$(PKGLIBDIR)#' \
	  scripts/tamebpf.launcher > $(DESTDIR)$(PREFIX)/bin/tamebpf
	chmod 0755 $(DESTDIR)$(PREFIX)/bin/tamebpf

# What the packages add to `make install` (debian/rules and the RPM spec call
# it): the systemd units with the installed command's path and the site's
# environment files' directory (ENVDIR: /etc/default on Debian,
# /etc/sysconfig on EL), the site configuration, the dashboard, alert rules
# and provisioning examples of contrib/ under DATADIR/tamebpf, the man pages
# (uncompressed: the packagers compress) and the bash completion.
UNITDIR ?= $(PREFIX)/lib/systemd/system
ENVDIR  ?= /etc/default
DATADIR ?= $(PREFIX)/share
install-system: install man
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(ENVDIR) $(DESTDIR)/etc/tamebpf \
	  $(DESTDIR)$(DATADIR)/tamebpf $(DESTDIR)$(DATADIR)/man/man1 \
	  $(DESTDIR)$(DATADIR)/bash-completion/completions
	for unit in tamebpf-export.service tamebpf-caps.service; do \
	  sed -e 's#/usr/local/bin/tamebpf#$(PREFIX)/bin/tamebpf#g' -e 's#/etc/default/#$(ENVDIR)/#g' \
	    docs/$$unit > $(DESTDIR)$(UNITDIR)/$$unit && chmod 0644 $(DESTDIR)$(UNITDIR)/$$unit; done
	install -m 0644 docs/tamebpf-export.default $(DESTDIR)$(ENVDIR)/tamebpf-export
	sed 's#/etc/default/#$(ENVDIR)/#g' packaging/tamebpf.default > $(DESTDIR)$(ENVDIR)/tamebpf
	chmod 0644 $(DESTDIR)$(ENVDIR)/tamebpf
	install -m 0644 packaging/caps.toml $(DESTDIR)/etc/tamebpf/caps.toml
	cp -R contrib/grafana contrib/prometheus $(DESTDIR)$(DATADIR)/tamebpf/
	chmod -R u=rwX,go=rX $(DESTDIR)$(DATADIR)/tamebpf
	install -m 0644 $(BUILD)/man/*.1 $(DESTDIR)$(DATADIR)/man/man1/
	install -m 0644 $(BUILD)/completion/tamebpf $(DESTDIR)$(DATADIR)/bash-completion/completions/

# The Debian package, from debian/ (debhelper): dpkg-buildpackage writes
# beside the source tree, so it builds in a copy of this checkout's files
# under $(BUILD)/deb/src; the .deb, .buildinfo and .changes land in
# $(BUILD)/deb/. The copy is the work tree's files (tracked and new, not
# ignored ones, less docs/results and tests), so uncommitted changes are
# built too, with the man pages' tools unpacked in its man-tools/
# (scripts/man-tools; their sdists are kept in $(BUILD)/sdist).
deb:
	$(call msg,DEB,$(BUILD)/deb)
	$(Q)command -v dh >/dev/null || { echo "make deb needs debhelper and dh-python:" \
	  "scripts/install-deps --test (or apt-get install debhelper dh-python)" >&2; exit 1; }
	$(Q)rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/src
	$(Q)git ls-files -z --cached --others --exclude-standard -- . ':!docs/results' ':!tests' | \
	  xargs -0 sh -c 'for f; do [ -e "$$f" ] && printf "%s\0" "$$f"; done' sh | \
	  tar --null -T - -cf - | tar -C $(BUILD)/deb/src -xf -
	$(Q)scripts/man-tools $(BUILD)/sdist $(BUILD)/deb/src/man-tools $(PY) >/dev/null
	$(Q)cd $(BUILD)/deb/src && dpkg-buildpackage -us -uc -b $(if $(V),,>../build.log 2>&1) || \
	  { tail -n 40 ../build.log >&2; exit 1; }
	$(Q)ls $(BUILD)/deb/tamebpf_*.deb

# The EL9 source RPM (scripts/build-srpm): Source0 is a `git archive` of
# this checkout (with uncommitted changes to tracked files), Source1 the
# prometheus_client sdist the exporter needs, vendored into the package (EL9
# has no python3.11 build of it), Source2 and Source3 those of the man
# pages' tools (scripts/man-tools), downloaded once into $(BUILD)/sdist.
RPMTOP := $(abspath $(BUILD))/rpm
srpm:
	$(call msg,SRPM,$(RPMTOP)/SRPMS)
	$(Q)command -v rpmbuild >/dev/null || { echo "make srpm needs rpmbuild:" \
	  "scripts/install-deps --test (Debian: apt-get install rpm; EL9: dnf install rpm-build)" >&2; exit 1; }
	$(Q)scripts/build-srpm "$(RPMTOP)" "$(PY)"

# The EL9 RPM, rebuilt from the SRPM as a builder would (`rpmbuild
# --rebuild`). --nodeps: the spec's BuildRequires are EL9's package names,
# which Debian's rpm database does not know (the tools themselves are here).
rpm: srpm
	$(call msg,RPM,$(RPMTOP)/RPMS)
	$(Q)rpmbuild --rebuild --nodeps --define "_topdir $(RPMTOP)" \
	  $(RPMTOP)/SRPMS/tamebpf-*.src.rpm $(if $(V),,>$(RPMTOP)/build.log 2>&1) || \
	  { tail -n 40 $(RPMTOP)/build.log >&2; exit 1; }
	$(Q)ls $(RPMTOP)/RPMS/*/tamebpf-*.rpm

# Man pages (section 1, one per command and sub-command) and the bash
# completion file, generated from the argparse parser by argparse-manpage and
# shtab (scripts/gen_man.py): the venv's (the man extra), or for the
# packages' builds those on MAN_PYTHONPATH (scripts/man-tools unpacks them).
MAN_PYTHONPATH ?=
man: | $(BUILD)
	$(call msg,MAN,$(BUILD)/man $(BUILD)/completion)
	$(Q)PYTHONPATH=userspace$(if $(MAN_PYTHONPATH),:$(MAN_PYTHONPATH)) $(PY) scripts/gen_man.py \
	  --man $(BUILD)/man --completion $(BUILD)/completion >/dev/null

clean:
	rm -rf $(BUILD)
