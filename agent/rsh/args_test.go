package rsh

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// Real argv shapes, as an argv-logging ssh wrapper recorded them from
// OpenMPI 4.1.4 (with plm_rsh_args) and MPICH 4.0.2 Hydra (with
// HYDRA_LAUNCHER_EXTRA_ARGS) across network-namespace pods, and as the
// programs' sources build them (Horovod's pre-flight, Open MPI's hostfile
// port after the host, Intel MPI's rsh bootstrap).
var (
	openMPIArgv = []string{
		"-p", "2222", "-i", "/work/ssh/id_ed25519", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "job-node-0-3.job",
		" orted", "-mca", "ess", `"env"`, "-mca", "ess_base_jobid", `"929824768"`, "-mca", "ess_base_vpid", "3",
		"-mca", "ess_base_num_procs", `"4"`, "-mca", "orte_node_regex",
		`"job-node-[1:0]-0,job-node-[1:0]-1.job,job-node-[1:0]-2.job,job-node-[1:0]-3.job@0(4)"`,
		"-mca", "orte_hnp_uri", `"929824768.0;tcp://10.250.0.10:56557"`, "-mca", "plm", `"rsh"`, "--tree-spawn",
		"-mca", "routed", `"radix"`, "-mca", "orte_parent_uri", `"929824768.0;tcp://10.250.0.10:56557"`,
		"-mca", "orte_keep_fqdn_hostnames", `"1"`, "-mca", "plm_rsh_agent", `"/work/bin/ssh-log"`,
		"-mca", "plm_rsh_args", `"-p 2222 -i /work/ssh/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"`,
		"-mca", "pmix", `"^s1,s2,cray,isolated"`,
	}
	openMPICommand = ` orted -mca ess "env" -mca ess_base_jobid "929824768" -mca ess_base_vpid 3 -mca ess_base_num_procs "4" -mca orte_node_regex "job-node-[1:0]-0,job-node-[1:0]-1.job,job-node-[1:0]-2.job,job-node-[1:0]-3.job@0(4)" -mca orte_hnp_uri "929824768.0;tcp://10.250.0.10:56557" -mca plm "rsh" --tree-spawn -mca routed "radix" -mca orte_parent_uri "929824768.0;tcp://10.250.0.10:56557" -mca orte_keep_fqdn_hostnames "1" -mca plm_rsh_agent "/work/bin/ssh-log" -mca plm_rsh_args "-p 2222 -i /work/ssh/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes" -mca pmix "^s1,s2,cray,isolated"`

	hydraArgv = []string{
		"-x", "-p", "2222", "-i", "/work/ssh/id_ed25519", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "job-node-0-1.job",
		`"/usr/bin/hydra_pmi_proxy"`, "--control-port", "10.250.0.10:34129", "--rmk", "user", "--launcher", "ssh",
		"--launcher-exec", "/work/bin/ssh-log", "--demux", "poll", "--iface", "eth0", "--pgid", "0", "--retries", "10",
		"--usize", "-2", "--pmi-port", "0", "--gpus-per-proc", "-2", "--proxy-id", "0",
	}
	hydraCommand = `"/usr/bin/hydra_pmi_proxy" --control-port 10.250.0.10:34129 --rmk user --launcher ssh --launcher-exec /work/bin/ssh-log --demux poll --iface eth0 --pgid 0 --retries 10 --usize -2 --pmi-port 0 --gpus-per-proc -2 --proxy-id 0`

	sshLogOptions = map[string]string{"stricthostkeychecking": "no", "userknownhostsfile": "/dev/null", "loglevel": "ERROR", "batchmode": "yes"}
)

type parseCase struct {
	name string
	args []string
	want Options
}

func parseCases() []parseCase {
	opts := func(o Options) Options {
		if o.Options == nil {
			o.Options = map[string]string{}
		}
		if o.ConnectionAttempts == 0 {
			o.ConnectionAttempts = 1
		}
		return o
	}
	return []parseCase{
		{"openmpi 4 plm_rsh_args", openMPIArgv, opts(Options{Host: "job-node-0-3.job", Port: 2222, Identity: "/work/ssh/id_ed25519",
			Identities: []string{"/work/ssh/id_ed25519"}, Command: openMPICommand, Options: sshLogOptions})},
		{"hydra with -x", hydraArgv, opts(Options{Host: "job-node-0-1.job", Port: 2222, Identity: "/work/ssh/id_ed25519",
			Identities: []string{"/work/ssh/id_ed25519"}, Command: hydraCommand, Options: sshLogOptions})},
		{"horovod options after host",
			[]string{"-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "w-1.job", "-p", "2222", "-i", "/k", "-o", "ConnectTimeout=10", "true"},
			opts(Options{Host: "w-1.job", Port: 2222, Identity: "/k", Identities: []string{"/k"}, Command: "true", ConnectTimeout: 10 * time.Second,
				Options: map[string]string{"passwordauthentication": "no", "stricthostkeychecking": "no", "connecttimeout": "10"}})},
		{"openmpi hostfile port after host", []string{"-x", "job-node-0-2.job", "-p", "3333", " orted", "-mca", "ess", `"env"`},
			opts(Options{Host: "job-node-0-2.job", Port: 3333, Command: ` orted -mca ess "env"`})},
		{"openmpi -p before and after host: first wins as in OpenSSH", []string{"-p", "2222", "h", "-p", "3333", "orted"},
			opts(Options{Host: "h", Port: 2222, Command: "orted"})},
		{"user@host", []string{"-x", "mpiuser@job-node-0-1.job", "orted"}, opts(Options{Host: "job-node-0-1.job", User: "mpiuser", Command: "orted"})},
		{"-l before user@ wins", []string{"-l", "root", "mpiuser@h", "true"}, opts(Options{Host: "h", User: "root", Command: "true"})},
		{"user@ before -l wins", []string{"mpiuser@h", "-l", "root", "true"}, opts(Options{Host: "h", User: "mpiuser", Command: "true"})},
		{"intel rsh bootstrap: host and command only", []string{"w-2", "/opt/intel/bin/hydra_bstrap_proxy", "--upstream-host", "l-0", "--upstream-port", "41000"},
			opts(Options{Host: "w-2", Command: "/opt/intel/bin/hydra_bstrap_proxy --upstream-host l-0 --upstream-port 41000"})},
		{"combined flags and attached values", []string{"-xqTn", "-p2222", "-oPort=7", "-lu", "-i/k", "h", "echo", "a b"},
			opts(Options{Host: "h", Port: 2222, User: "u", Identity: "/k", Identities: []string{"/k"}, NoStdin: true, Quiet: true,
				Command: "echo a b", Options: map[string]string{"port": "7"}})},
		{"-o Port first", []string{"-o", "Port=5", "-p", "6", "h", "true"}, opts(Options{Host: "h", Port: 5, Command: "true", Options: map[string]string{"port": "5"}})},
		{"-o forms, first value wins", []string{"-o", "ConnectTimeout 7", "-o", "ConnectTimeout=8", "-o", "ConnectionAttempts = 10", "-o", `User="bob"`, "h", "true"},
			opts(Options{Host: "h", User: "bob", ConnectTimeout: 7 * time.Second, ConnectionAttempts: 10, Command: "true",
				Options: map[string]string{"connecttimeout": "7", "connectionattempts": "10", "user": "bob"}})},
		{"keys case-insensitive", []string{"-o", "STRICTHOSTKEYCHECKING=accept-new", "h", "true"},
			opts(Options{Host: "h", Command: "true", Options: map[string]string{"stricthostkeychecking": "accept-new"}})},
		{"several identities", []string{"-i", "/a", "-o", "IdentityFile=/b", "-i", "/c", "h", "true"},
			opts(Options{Host: "h", Identity: "/a", Identities: []string{"/a", "/b", "/c"}, Command: "true", Options: map[string]string{"identityfile": "/b"}})},
		{"-- ends options", []string{"-p", "1", "--", "h", "-x", "y"}, opts(Options{Host: "h", Port: 1, Command: "-x y"})},
		{"-- after host", []string{"h", "--", "-x"}, opts(Options{Host: "h", Command: "-x"})},
		{"command words joined by single spaces", []string{"h", "echo a b", "'c d'"}, opts(Options{Host: "h", Command: "echo a b 'c d'"})},
		{"no command", []string{"-v", "-v", "h"}, opts(Options{Host: "h", Verbose: 2})},
		{"-F ignored", []string{"-F", "/dev/null", "h", "true"}, opts(Options{Host: "h", Command: "true"})},
		{"horovodrun task: options after the host, the command as one word",
			[]string{"-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "w-0.job", "-p", "2222", "cd /tmp > /dev/null 2>&1 ; HOROVOD_RANK=0 python train.py"},
			opts(Options{Host: "w-0.job", Port: 2222, Command: "cd /tmp > /dev/null 2>&1 ; HOROVOD_RANK=0 python train.py",
				Options: map[string]string{"passwordauthentication": "no", "stricthostkeychecking": "no"}})},
		{"OpenSSH letters without meaning here are listed, not refused",
			[]string{"-4", "-t", "-b", "10.0.0.1", "-c", "aes128-ctr", "-E", "/tmp/log", "h", "true"},
			opts(Options{Host: "h", Command: "true", Ignored: []string{"-4 (IPv4 only)", "-t (a pseudo-terminal)",
				"-b 10.0.0.1 (a bind address)", "-c aes128-ctr (a cipher list)", "-E /tmp/log (a log file)"}})},
		{"forwarding requests are warned about",
			[]string{"-A", "-X", "-o", "ForwardAgent=yes", "-o", "ForwardX11=no", "h", "true"},
			opts(Options{Host: "h", Command: "true", Options: map[string]string{"forwardagent": "yes", "forwardx11": "no"},
				Warnings: []string{"-A: agent forwarding is not supported; running the command without it",
					"-X: X11 forwarding is not supported; running the command without it",
					"-o ForwardAgent=yes: agent forwarding is not supported; running the command without it"}})},
		{"unknown -o keys are ignored with a note",
			[]string{"-o", "Foo=bar", "-o", "ProxyCommand=none", "-o", "Tunnel=no", "h", "true"},
			opts(Options{Host: "h", Command: "true", Options: map[string]string{"foo": "bar", "proxycommand": "none", "tunnel": "no"},
				Ignored: []string{"-o Foo=bar (unknown to podmpi's ssh client)"}})},
		{"StdinNull", []string{"-o", "StdinNull=yes", "h", "true"},
			opts(Options{Host: "h", Command: "true", NoStdin: true, Options: map[string]string{"stdinnull": "yes"}})},
		{"-V needs no host", []string{"-V"}, opts(Options{Version: true})},
		{"--help needs no host", []string{"--help"}, opts(Options{Help: true})},
		{"-h needs no host", []string{"-qh"}, opts(Options{Help: true, Quiet: true})},
		{"--help after the command is the command's", []string{"h", "mpirun", "--help"}, opts(Options{Host: "h", Command: "mpirun --help"})},
		{"-h after the command is the command's", []string{"h", "-p", "2", "ls", "-h"}, opts(Options{Host: "h", Port: 2, Command: "ls -h"})},
		{"ipv6 literal", []string{"[::1]", "true"}, opts(Options{Host: "::1", Command: "true"})},
		{"empty command word kept", []string{"h", "a", "", "b"}, opts(Options{Host: "h", Command: "a  b"})},
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseArgs(%q)\n got  %+v\n want %+v", tc.args, got, tc.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no host given"},
		{[]string{"-p", "2222"}, "no host given"},
		{[]string{"-Z", "h", "true"}, "unknown option -Z"},
		{[]string{"-xL", "8080:h:80", "h"}, "option -L (local port forwarding) is refused"},
		{[]string{"h", "-R", "80:x:80", "true"}, "option -R (remote port forwarding) is refused"},
		{[]string{"-D", "1080", "h"}, "option -D (dynamic (SOCKS) port forwarding) is refused"},
		{[]string{"-W", "x:22", "h"}, "option -W (stdio forwarding) is refused"},
		{[]string{"-J", "jump", "h", "true"}, "option -J (a jump host) is refused"},
		{[]string{"-N", "h"}, "option -N (a connection without a remote command) is refused"},
		{[]string{"-f", "h", "true"}, "option -f"},
		{[]string{"-O", "exit", "h"}, "option -O"},
		{[]string{"-o", "LocalForward=8080 h:80", "h"}, "LocalForward=8080 h:80 (local port forwarding) is refused"},
		{[]string{"-o", "Hostname=elsewhere", "h", "true"}, "(another host name than the one given) is refused"},
		{[]string{"-o", "ProxyJump=bastion", "h", "true"}, "(a jump host) is refused"},
		{[]string{"-o", "StdinNull=maybe", "h", "true"}, "StdinNull=maybe"},
		{[]string{"h", "-p"}, "option -p needs an argument"},
		{[]string{"-p", "0", "h"}, `bad port "0"`},
		{[]string{"-p", "65536", "h"}, `bad port "65536"`},
		{[]string{"-p", "22x", "h"}, `bad port "22x"`},
		{[]string{"-o", "ConnectTimeout=", "h"}, "missing value"},
		{[]string{"-o", "=x", "h"}, "want Key=Value"},
		{[]string{"-o", "ConnectionAttempts=0", "h"}, "ConnectionAttempts=0"},
		{[]string{"-o", "ConnectTimeout=soon", "h"}, "ConnectTimeout=soon"},
		{[]string{"-o", "StrictHostKeyChecking=maybe", "h"}, "StrictHostKeyChecking=maybe"},
		{[]string{"-o", "Port=x", "h"}, `bad port "x"`},
		{[]string{"@h", "true"}, "empty user name"},
		{[]string{"u@", "true"}, "empty host name"},
		{[]string{"a b", "true"}, "invalid host name"},
		{[]string{"h\x00", "true"}, "invalid host name"},
		{[]string{"[[", "true"}, "invalid host name"},
		{[]string{"--", "-h", "true"}, "starts with '-'"},
	} {
		_, err := ParseArgs(tc.args)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) = %v, want a UsageError containing %q", tc.args, err, tc.want)
		}
	}
}

// FuzzParseArgs: arbitrary argv (NUL-separated) never panics, and whatever
// parses is sane and round-trips through the canonical form
// "-p P -l U -- host command".
func FuzzParseArgs(f *testing.F) {
	for _, tc := range parseCases() {
		f.Add(strings.Join(tc.args, "\x00"))
	}
	f.Add("-o\x00Port=1\x00-p\x002\x00h")
	f.Add("-\x00--\x00-")
	f.Add("-ppp\x00h")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		o, err := ParseArgs(args)
		if err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("error is not a UsageError: %T %v", err, err)
			}
			return
		}
		if (o.Version || o.Help) && o.Host == "" {
			return // -V, -h or --help without a host: nothing to connect to
		}
		if o.Host == "" || strings.IndexFunc(o.Host, unicode.IsSpace) >= 0 {
			t.Fatalf("bad host %q", o.Host)
		}
		if o.Port < 0 || o.Port > 65535 || o.ConnectionAttempts < 1 || o.ConnectTimeout < 0 {
			t.Fatalf("bad values %+v", o)
		}
		if len(o.Identities) > 0 && o.Identity != o.Identities[0] {
			t.Fatalf("Identity %q vs %q", o.Identity, o.Identities)
		}
		canon := []string{}
		if o.Port != 0 {
			canon = append(canon, "-p", strconv.Itoa(o.Port))
		}
		if o.User != "" {
			canon = append(canon, "-l", o.User)
		}
		canon = append(canon, "--", o.Host, o.Command)
		o2, err := ParseArgs(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q: %v", canon, args, err)
		}
		if o2.Host != o.Host || o2.Port != o.Port || o2.User != o.User || o2.Command != o.Command {
			t.Fatalf("round trip of %q: %+v != %+v", args, o2, o)
		}
	})
}
