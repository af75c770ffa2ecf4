// Package docs holds podmpi's user documentation (Markdown) and the test that
// keeps it honest against the code: every exit code of agent/exitcode.Table,
// every diagnosis phase of agent/sshclient and agent/launcher, every flag of
// both binaries with its PODMPI_* twin and default, every other PODMPI_*
// variable the code reads, every relative link, repository path and make
// target the pages mention, every benchmark figure the README quotes (the
// headline of BENCHMARKS.md's newest run), and every picture (re-rendered
// from its source). The lists come from the code (go/ast and the binaries'
// --help), never from this file.
package docs

import (
	"bufio"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
)

// root is the repository root, relative to this package.
const root = ".."

// pages are the documentation files this package owns.
var pages = []string{"quickstart.md", "install.md", "configuration.md", "troubleshooting.md", "migration.md", "security.md", "compatibility.md", "cluster.md", "monitoring.md"}

// Section titles the checks look for (level-2 headings).
const (
	exitCodesTitle      = "Exit codes"
	launcherPhasesTitle = "Launcher phases"
	sshPhasesTitle      = "SSH diagnosis phases"
)

// binaries are the cmd packages whose flags configuration.md documents, each
// under a level-2 heading "`<name>` flags".
var binaries = []string{"launcher", "worker-agent"}

// ---------------------------------------------------------------- markdown

// section is a heading and the lines up to the next heading of the same or a
// higher level (headings inside fenced code blocks do not count).
type section struct {
	level int
	title string
	line  int      // 1-based line of the heading
	body  []string // lines after the heading, sub-sections included
}

func (s section) text() string { return strings.Join(s.body, "\n") }

var headingRe = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// parseSections returns every heading of md with its body.
func parseSections(md string) []section {
	lines := strings.Split(md, "\n")
	type h struct{ idx, level int }
	var hs []h
	var secs []section
	inFence := false
	for i, l := range lines {
		if isFence(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := headingRe.FindStringSubmatch(l); m != nil {
			hs = append(hs, h{i, len(m[1])})
			secs = append(secs, section{level: len(m[1]), title: m[2], line: i + 1})
		}
	}
	for k := range secs {
		end := len(lines)
		for _, next := range hs[k+1:] {
			if next.level <= secs[k].level {
				end = next.idx
				break
			}
		}
		secs[k].body = lines[hs[k].idx+1 : end]
	}
	return secs
}

func isFence(l string) bool {
	t := strings.TrimSpace(l)
	return strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")
}

// children are the sections of level parent.level+1 inside parent.
func children(all []section, parent section) []section {
	var out []section
	last := parent.line + len(parent.body)
	for _, s := range all {
		if s.line > parent.line && s.line <= last && s.level == parent.level+1 {
			out = append(out, s)
		}
	}
	return out
}

func findSection(t *testing.T, all []section, level int, title, page string) section {
	t.Helper()
	for _, s := range all {
		if s.level == level && s.title == title {
			return s
		}
	}
	t.Fatalf("%s: no %s %q heading", page, strings.Repeat("#", level), title)
	return section{}
}

var codeSpanRe = regexp.MustCompile("`([^`]+)`")

// codeSpans returns the contents of the inline code spans of s.
func codeSpans(s string) []string {
	var out []string
	for _, m := range codeSpanRe.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// proseCodeSpans returns the inline code spans of md outside fenced blocks,
// line by line (a fence's backticks would pair up with the wrong ones).
func proseCodeSpans(md string) []string {
	var out []string
	inFence := false
	for l := range strings.SplitSeq(md, "\n") {
		if isFence(l) {
			inFence = !inFence
			continue
		}
		if !inFence {
			out = append(out, codeSpans(l)...)
		}
	}
	return out
}

func readPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("reading docs/%s: %v", name, err)
	}
	return string(b)
}

// slug is GitHub's anchor for a heading: lower case, punctuation other than
// '-' and '_' dropped, spaces to '-'.
func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns every heading anchor of md, with GitHub's -1, -2 suffixes
// for repeated titles.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, s := range parseSections(md) {
		a := slug(s.title)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// ------------------------------------------------------------- Go sources

// parseDir parses the non-test Go files of a directory under the repository
// root (go/ast only: it works while other packages are mid-edit).
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", p, err)
		}
		files = append(files, f)
	}
	return fset, files
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// typedStringConsts returns the values of the string constants of type typ
// ("" matches untyped constants) whose names start with prefix.
func typedStringConsts(files []*ast.File, typ, prefix string) []string {
	var out []string
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				tn := ""
				if id, ok := vs.Type.(*ast.Ident); ok {
					tn = id.Name
				}
				if tn != typ {
					continue
				}
				for i, name := range vs.Names {
					if i >= len(vs.Values) || !strings.HasPrefix(name.Name, prefix) {
						continue
					}
					if s, ok := stringLit(vs.Values[i]); ok {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// phaseLiterals returns string literals given to a field named Phase in a
// composite literal (Failure{Phase: "run", ...}).
func phaseLiterals(files []*ast.File) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Phase" {
				if s, ok := stringLit(kv.Value); ok {
					out = append(out, s)
				}
			}
			return true
		})
	}
	return out
}

// flagMethodRe matches pflag.FlagSet's flag-defining methods.
var flagMethodRe = regexp.MustCompile(`^(|Bool|Int|Int8|Int16|Int32|Int64|Uint|Uint8|Uint16|Uint32|Uint64|Float32|Float64|String|StringSlice|StringArray|StringToString|IntSlice|Duration|DurationSlice|Count|IP|IPNet)(Var)?(P)?$`)

// flagRegistrations returns the names of the flags registered in files:
// fs.XxxVar(&v, "name", ...) or fs.Xxx("name", ...) with a literal name.
func flagRegistrations(files []*ast.File, inFunc func(*ast.FuncDecl) bool) []string {
	var out []string
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || (inFunc != nil && !inFunc(fd)) {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				m := flagMethodRe.FindStringSubmatch(sel.Sel.Name)
				if m == nil {
					return true
				}
				idx := 0
				if m[2] == "Var" {
					idx = 1
				}
				if idx < len(call.Args) {
					if name, ok := stringLit(call.Args[idx]); ok {
						out = append(out, name)
					}
				}
				return true
			})
		}
	}
	return out
}

// usesLogFlags reports whether a cmd package registers cli.LogFlags
// (a field of type cli.LogFlags and a call to its Register method).
func usesLogFlags(files []*ast.File) bool {
	typ, call := false, false
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "cli" && x.Sel.Name == "LogFlags" {
					typ = true
				}
				if x.Sel.Name == "Register" {
					call = true
				}
			}
			return true
		})
	}
	return typ && call
}

// flagSources are, for each binary, the packages whose source registers its
// flags: the command and the role's Config.Bind.
var flagSources = map[string][]string{
	"launcher":     {"cmd/launcher", "agent/launcher"},
	"worker-agent": {"cmd/worker-agent"},
}

// sourceFlags returns the flags a binary registers according to its source:
// its own registrations plus agent/cli's LogFlags when it uses them.
func sourceFlags(t *testing.T, bin string) []string {
	t.Helper()
	var files []*ast.File
	for _, dir := range flagSources[bin] {
		_, fs := parseDir(t, filepath.FromSlash(dir))
		files = append(files, fs...)
	}
	flags := flagRegistrations(files, nil)
	if usesLogFlags(files) {
		_, cliFiles := parseDir(t, filepath.Join("agent", "cli"))
		flags = append(flags, flagRegistrations(cliFiles, func(fd *ast.FuncDecl) bool {
			if fd.Name.Name != "Register" || fd.Recv == nil || len(fd.Recv.List) != 1 {
				return false
			}
			typ := fd.Recv.List[0].Type
			if st, ok := typ.(*ast.StarExpr); ok {
				typ = st.X
			}
			id, ok := typ.(*ast.Ident)
			return ok && id.Name == "LogFlags"
		})...)
	}
	slices.Sort(flags)
	return slices.Compact(flags)
}

// extraEnvVars returns the PODMPI_* variables the binaries read that are not
// flag twins: string constants/variables whose whole value is a PODMPI_ name
// (PODMPI_STATE_DIR) and cli.EnvName("x") calls (the rsh client's twins).
func extraEnvVars(t *testing.T) []string {
	t.Helper()
	envRe := regexp.MustCompile(`^PODMPI_[A-Z0-9_]+$`)
	var out []string
	for _, dir := range []string{"cmd/launcher", "cmd/launcher/podmpi-rsh", "cmd/worker-agent", "agent/rsh", "agent/rsh/relay", "agent/launcher/mpirun", "agent/launcher", "sshd", "agent/worker"} {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			continue
		}
		_, files := parseDir(t, dir)
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.ValueSpec:
					for _, v := range x.Values {
						if s, ok := stringLit(v); ok && envRe.MatchString(s) {
							out = append(out, s)
						}
					}
				case *ast.CallExpr:
					sel, ok := x.Fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "EnvName" || len(x.Args) != 1 {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "cli" {
						if s, ok := stringLit(x.Args[0]); ok {
							out = append(out, cli.EnvName(s))
						}
					}
				}
				return true
			})
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ------------------------------------------------------------------ tests

// TestExitCodesInTroubleshooting: every exitcode.Table entry has a section
// "### <code> `<name>`" under "## Exit codes" in troubleshooting.md, with a
// **Fix:** paragraph; and configuration.md lists every code and name.
func TestExitCodesInTroubleshooting(t *testing.T) {
	md := readPage(t, "troubleshooting.md")
	all := parseSections(md)
	parent := findSection(t, all, 2, exitCodesTitle, "troubleshooting.md")
	subs := children(all, parent)
	if len(exitcode.Table) == 0 {
		t.Fatal("exitcode.Table is empty")
	}
	for _, e := range exitcode.Table {
		code := strconv.Itoa(int(e.Code))
		var found *section
		for i, s := range subs {
			f := strings.Fields(s.title)
			if len(f) > 0 && f[0] == code && slices.Contains(codeSpans(s.title), e.Name) {
				found = &subs[i]
				break
			}
		}
		if found == nil {
			t.Errorf("troubleshooting.md: no \"### %s `%s`\" under %q (exitcode.Table: %s, %s)", code, e.Name, exitCodesTitle, e.Binary, e.Meaning)
			continue
		}
		if !strings.Contains(found.text(), "**Fix:**") {
			t.Errorf("troubleshooting.md:%d: exit code %s `%s` has no **Fix:** paragraph", found.line, code, e.Name)
		}
	}

	conf := readPage(t, "configuration.md")
	rows := tableRows(conf)
	for _, e := range exitcode.Table {
		code := strconv.Itoa(int(e.Code))
		ok := false
		for _, r := range rows {
			if len(r) >= 2 && strings.Trim(r[0], "` ") == code && slices.Contains(codeSpans(r[1]), e.Name) {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("configuration.md: no table row \"| %s | `%s` | ...\" for exit code %s", code, e.Name, code)
		}
	}
}

// checkPhaseSections requires a "### `<phase>`" section under the parent
// heading for every phase, each with **Confirm:** and **Fix:** paragraphs.
func checkPhaseSections(t *testing.T, md, parentTitle string, phases []string) {
	t.Helper()
	all := parseSections(md)
	parent := findSection(t, all, 2, parentTitle, "troubleshooting.md")
	subs := children(all, parent)
	for _, p := range phases {
		var found *section
		for i, s := range subs {
			if spans := codeSpans(s.title); len(spans) > 0 && spans[0] == p {
				found = &subs[i]
				break
			}
		}
		if found == nil {
			t.Errorf("troubleshooting.md: no \"### `%s`\" section under %q", p, parentTitle)
			continue
		}
		body := found.text()
		for _, label := range []string{"**Confirm:**", "**Fix:**"} {
			if !strings.Contains(body, label) {
				t.Errorf("troubleshooting.md:%d: phase `%s` has no %s paragraph", found.line, p, label)
			}
		}
	}
}

// TestSSHPhasesInTroubleshooting: every sshclient.Phase constant, read from
// agent/sshclient's source, has its own section.
func TestSSHPhasesInTroubleshooting(t *testing.T) {
	_, files := parseDir(t, "agent/sshclient")
	phases := typedStringConsts(files, "Phase", "")
	if len(phases) < 5 {
		t.Fatalf("found only %d Phase constants in agent/sshclient (%v): the parser no longer matches the source", len(phases), phases)
	}
	checkPhaseSections(t, readPage(t, "troubleshooting.md"), sshPhasesTitle, phases)
}

// TestLauncherPhasesInTroubleshooting: every launcher phase (the Phase*
// constants of agent/launcher and literal Failure{Phase: "..."} values in
// the launcher's code) has its own section.
func TestLauncherPhasesInTroubleshooting(t *testing.T) {
	_, files := parseDir(t, "agent/launcher")
	phases := typedStringConsts(files, "", "Phase")
	phases = append(phases, phaseLiterals(files)...)
	_, cmdFiles := parseDir(t, "cmd/launcher")
	phases = append(phases, phaseLiterals(cmdFiles)...)
	slices.Sort(phases)
	phases = slices.Compact(phases)
	if len(phases) < 4 {
		t.Fatalf("found only %d launcher phases (%v): the parser no longer matches the source", len(phases), phases)
	}
	checkPhaseSections(t, readPage(t, "troubleshooting.md"), launcherPhasesTitle, phases)
}

// tableRows returns the cells of every Markdown table row of md outside
// code fences (the separator rows excluded).
func tableRows(md string) [][]string {
	var rows [][]string
	inFence := false
	for l := range strings.SplitSeq(md, "\n") {
		if isFence(l) {
			inFence = !inFence
			continue
		}
		t := strings.TrimSpace(l)
		if inFence || !strings.HasPrefix(t, "|") {
			continue
		}
		t = strings.TrimSuffix(strings.TrimPrefix(t, "|"), "|")
		// Split on '|' outside code spans (a default may contain one).
		var cells []string
		var cur strings.Builder
		inCode := false
		for _, r := range t {
			switch {
			case r == '`':
				inCode = !inCode
				cur.WriteRune(r)
			case r == '|' && !inCode:
				cells = append(cells, strings.TrimSpace(cur.String()))
				cur.Reset()
			default:
				cur.WriteRune(r)
			}
		}
		cells = append(cells, strings.TrimSpace(cur.String()))
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue
		}
		rows = append(rows, cells)
	}
	return rows
}

// flagRow finds the table row documenting --name in the binary's section.
// Its first cell holds the code span `--name`; the second the twin.
func flagRow(rows [][]string, name string) []string {
	for _, r := range rows {
		if len(r) >= 3 && slices.Contains(codeSpans(r[0]), "--"+name) {
			return r
		}
	}
	return nil
}

func binarySection(t *testing.T, conf, bin string) section {
	t.Helper()
	return findSection(t, parseSections(conf), 2, "`"+bin+"` flags", "configuration.md")
}

// TestFlagsInConfigurationFromSource: every flag registered in the source of
// each binary has a row "| `--flag` | `PODMPI_FLAG` | default | ... |" in its
// section of configuration.md, and no row documents a flag that does not
// exist.
func TestFlagsInConfigurationFromSource(t *testing.T) {
	conf := readPage(t, "configuration.md")
	for _, bin := range binaries {
		flags := sourceFlags(t, bin)
		if len(flags) < 5 {
			t.Fatalf("%s: found only %d flag registrations (%v): the parser no longer matches the source", bin, len(flags), flags)
		}
		rows := tableRows(binarySection(t, conf, bin).text())
		for _, f := range flags {
			r := flagRow(rows, f)
			if r == nil {
				t.Errorf("configuration.md, `%s` flags: no row for --%s", bin, f)
				continue
			}
			if env := cli.EnvName(f); !slices.Contains(codeSpans(r[1]), env) {
				t.Errorf("configuration.md, `%s` flags: the row of --%s does not name its twin `%s` in the second column", bin, f, env)
			}
		}
		for _, r := range rows {
			for _, s := range codeSpans(r[0]) {
				if name, ok := strings.CutPrefix(s, "--"); ok && !slices.Contains(flags, name) && name != "help" && name != "version" {
					t.Errorf("configuration.md, `%s` flags: documents --%s, which %s does not register", bin, name, bin)
				}
			}
		}
	}
}

// helpFlag is one flag line of --help.
type helpFlag struct {
	name, env, def string
}

var (
	helpLineRe    = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9.-]*)(?: [a-zA-Z0-9]+)?\s{2,}(.*)$`)
	helpEnvRe     = regexp.MustCompile(`\[\$(PODMPI_[A-Z0-9_]+)\]`)
	helpDefaultRe = regexp.MustCompile(`\]\s+\(default (.*)\)\s*$`)
)

func parseHelp(out string) []helpFlag {
	var fl []helpFlag
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := helpLineRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := helpFlag{name: m[1]}
		if e := helpEnvRe.FindStringSubmatch(m[2]); e != nil {
			f.env = e[1]
		}
		if d := helpDefaultRe.FindStringSubmatch(m[2]); d != nil {
			f.def = d[1]
		}
		fl = append(fl, f)
	}
	return fl
}

// defaultDocumented reports whether the default column of a row states def
// (as --help prints it: quoted strings, Go durations).
func defaultDocumented(cell, def string) bool {
	if uq, err := strconv.Unquote(def); err == nil {
		def = uq
	}
	if d, err := time.ParseDuration(def); err == nil {
		for _, s := range codeSpans(cell) {
			if dd, err := time.ParseDuration(s); err == nil && dd == d {
				return true
			}
		}
		return false
	}
	if def == "[]" {
		return true
	}
	return slices.Contains(codeSpans(cell), def)
}

// TestFlagsInConfigurationFromHelp builds both binaries, reads their --help
// under a minimal environment (so that computed defaults are the documented
// ones), and checks that every flag has its [$PODMPI_...] twin, that the twin
// and the default are in configuration.md, and that the flags match the
// source-level registrations the other test checks.
func TestFlagsInConfigurationFromHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binaries")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("no go command to build the binaries")
		}
	}
	conf := readPage(t, "configuration.md")
	dir := t.TempDir()
	for _, bin := range binaries {
		t.Run(bin, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			exe := filepath.Join(dir, bin)
			build := exec.CommandContext(ctx, goBin, "build", "-o", exe, "./cmd/"+bin)
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./cmd/%s: %v\n%s", bin, err, out)
			}
			help := exec.CommandContext(ctx, exe, "--help")
			help.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
			out, err := help.CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", bin, err, out)
			}
			flags := parseHelp(string(out))
			src := sourceFlags(t, bin)
			rows := tableRows(binarySection(t, conf, bin).text())
			var names []string
			for _, f := range flags {
				if f.name == "help" || f.name == "version" {
					continue // cobra's own
				}
				names = append(names, f.name)
				if want := cli.EnvName(f.name); f.env != want {
					t.Errorf("%s --help: --%s shows twin %q, want [$%s]", bin, f.name, f.env, want)
				}
				r := flagRow(rows, f.name)
				if r == nil {
					t.Errorf("configuration.md, `%s` flags: no row for --%s", bin, f.name)
					continue
				}
				if !slices.Contains(codeSpans(r[1]), f.env) {
					t.Errorf("configuration.md, `%s` flags: the row of --%s lacks `%s`", bin, f.name, f.env)
				}
				if f.def != "" && !defaultDocumented(r[2], f.def) {
					t.Errorf("configuration.md, `%s` flags: the default of --%s is %s per --help; the row says %q", bin, f.name, f.def, r[2])
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, src) {
				t.Errorf("%s: flags in --help %v differ from the registrations parsed from cmd/%s %v", bin, names, bin, src)
			}
		})
	}
}

// TestOtherEnvVarsInConfiguration: PODMPI_* variables that are not flag
// twins (PODMPI_STATE_DIR, the rsh client's PODMPI_SSH_CONNECT_TIMEOUT) are
// documented in configuration.md.
func TestOtherEnvVarsInConfiguration(t *testing.T) {
	conf := readPage(t, "configuration.md")
	spans := proseCodeSpans(conf)
	vars := extraEnvVars(t)
	if len(vars) == 0 {
		t.Fatal("no PODMPI_* variables found in the sources: the parser no longer matches them")
	}
	for _, v := range vars {
		if !slices.Contains(spans, v) {
			t.Errorf("configuration.md does not mention `%s` (read by the code)", v)
		}
	}
}

var (
	linkRe     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	repoPathRe = regexp.MustCompile(`^(?:\./)?((?:examples|deploy|charts|images|scripts|cmd|agent|docs|sshd|hostfile|gpu|test)/[A-Za-z0-9._/-]+)$`)
	makeRe     = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:sudo\s+)?make\s+([a-z][a-z0-9-]*)`)
	targetRe   = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// TestLinksAndPaths: relative links resolve to existing files (and their
// #anchors to headings), repository paths in code spans and code blocks
// exist, and every `make X` in code names a Makefile target.
func TestLinksAndPaths(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatalf("reading Makefile: %v", err)
	}
	var targets []string
	for _, m := range targetRe.FindAllStringSubmatch(string(mk), -1) {
		targets = append(targets, m[1])
	}
	for _, page := range pages {
		md := readPage(t, page)
		lines := strings.Split(md, "\n")
		inFence := false
		for i, l := range lines {
			where := page + ":" + strconv.Itoa(i+1)
			if isFence(l) {
				inFence = !inFence
				continue
			}
			if !inFence {
				for _, m := range linkRe.FindAllStringSubmatch(l, -1) {
					checkLink(t, where, page, m[1])
				}
			}
			// Repository paths: code spans outside fences, words inside.
			var words []string
			if inFence {
				words = strings.FieldsFunc(l, func(r rune) bool {
					return r == ' ' || r == '\t' || r == '"' || r == '\'' || r == '=' || r == ','
				})
			} else {
				words = codeSpans(l)
			}
			for _, w := range words {
				m := repoPathRe.FindStringSubmatch(strings.TrimRight(w, ".:;)"))
				if m == nil || strings.ContainsAny(m[1], "*<>{}$") {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
					t.Errorf("%s: path %s does not exist in the repository", where, m[1])
				}
			}
			// make commands: a code span or a code line that starts
			// with one (after VAR=value assignments and sudo).
			cmds := []string{strings.TrimSpace(l)}
			if !inFence {
				cmds = codeSpans(l)
			}
			for _, c := range cmds {
				if m := makeRe.FindStringSubmatch(c); m != nil && !slices.Contains(targets, m[1]) {
					t.Errorf("%s: `make %s`: no such Makefile target (have %v)", where, m[1], targets)
				}
			}
		}
	}
}

func checkLink(t *testing.T, where, page, target string) {
	t.Helper()
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := page
	if file != "" {
		path = filepath.Clean(file)
	}
	full := filepath.Join(".", path)
	if _, err := os.Stat(full); err != nil {
		t.Errorf("%s: link %q: %s does not exist", where, target, filepath.Join("docs", path))
		return
	}
	if anchor == "" || !strings.HasSuffix(full, ".md") {
		return
	}
	b, err := os.ReadFile(full)
	if err != nil {
		t.Errorf("%s: link %q: %v", where, target, err)
		return
	}
	if !anchors(string(b))[anchor] {
		t.Errorf("%s: link %q: no heading with anchor #%s in %s", where, target, anchor, full)
	}
}

// TestPagesExist guards against a page being dropped from the set the other
// tests read.
func TestPagesExist(t *testing.T) {
	for _, p := range pages {
		if st, err := os.Stat(p); err != nil || st.Size() < 500 {
			t.Errorf("docs/%s missing or nearly empty (%v)", p, err)
		}
	}
}

// TestMarkdownHelpers checks the parsers the other tests rely on, so that a
// passing docs test cannot come from a parser that finds nothing.
func TestMarkdownHelpers(t *testing.T) {
	md := "# T\n\n## A b\n\ntext\n\n### 66 `discovery-timeout`\n\n**Fix:** x\n\n```sh\n## not a heading\n```\n\n## C\n| `--x` | `PODMPI_X` | `5m` | y |\n|---|---|---|---|\n"
	secs := parseSections(md)
	if len(secs) != 4 || secs[1].title != "A b" || secs[2].level != 3 {
		t.Fatalf("parseSections: %+v", secs)
	}
	if kids := children(secs, secs[1]); len(kids) != 1 || kids[0].title != "66 `discovery-timeout`" {
		t.Fatalf("children: %+v", kids)
	}
	if !strings.Contains(secs[2].text(), "not a heading") {
		t.Errorf("fenced lines must stay in the body")
	}
	rows := tableRows(md)
	if len(rows) != 1 || flagRow(rows, "x") == nil || flagRow(rows, "y") != nil {
		t.Fatalf("tableRows/flagRow: %q", rows)
	}
	if !defaultDocumented(rows[0][2], "5m0s") || defaultDocumented(rows[0][2], "5s") {
		t.Errorf("defaultDocumented on durations")
	}
	if !defaultDocumented("`:9022`", `":9022"`) || defaultDocumented("`:2222`", `":9022"`) {
		t.Errorf("defaultDocumented on strings")
	}
	if got := slug("66 `discovery-timeout`"); got != "66-discovery-timeout" {
		t.Errorf("slug = %q", got)
	}
	h := parseHelp("Flags:\n      --a.b-c string   x [$PODMPI_A_B_C] (default \"q\")\n  -h, --help   help\n      --on   y [$PODMPI_ON]\n")
	if len(h) != 3 || h[0] != (helpFlag{"a.b-c", "PODMPI_A_B_C", `"q"`}) || h[2] != (helpFlag{"on", "PODMPI_ON", ""}) {
		t.Errorf("parseHelp = %+v", h)
	}
}

// TestNothingCitesOutsideTheRepo: the project stands alone; a comment, doc
// or script that points at notes outside the repository would send a
// reader nowhere.
func TestNothingCitesOutsideTheRepo(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files", "*.go", "*.md", "*.sh", "*.py", "Makefile", "*.yaml", "*.yml").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	cite := regexp.MustCompile(`\.\./shared/|/work/shared|harness-notes|perf-security\.md|cluster-notes|[^-]conventions\.md|conventions §`)
	for _, f := range strings.Fields(string(out)) {
		if f == "docs/docs_test.go" { // this test's own pattern
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			if cite.MatchString(line) {
				t.Errorf("%s:%d cites notes outside the repository: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestRunbookLinks: every runbook_url of the monitoring pack's alerts
// points at a section of troubleshooting.md that exists.
func TestRunbookLinks(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "base", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	have := anchors(readPage(t, "troubleshooting.md"))
	links := regexp.MustCompile(`runbook_url: \S+/docs/troubleshooting\.md#(\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(links) < 5 {
		t.Fatalf("only %d runbook links found", len(links))
	}
	for _, l := range links {
		if !have[l[1]] {
			t.Errorf("runbook_url anchor #%s is not a section of troubleshooting.md", l[1])
		}
	}
}
