package rsh

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Options is a parsed ssh(1)-style command line.
type Options struct {
	// Host is the destination, without user@.
	Host string
	// User is the login name from -l, user@host or -o User, whichever came
	// first (as OpenSSH does); empty when none was given.
	User string
	// Port from -p or -o Port, whichever came first; 0 when none was given.
	Port int
	// Identity is the first -i (or -o IdentityFile); Identities holds all of
	// them in order.
	Identity   string
	Identities []string
	// Command is the remaining words joined by single spaces, exactly as
	// OpenSSH sends them; the remote shell interprets it.
	Command string
	// Options are the -o settings, keys lower-cased, first value kept.
	Options map[string]string
	// NoStdin is -n: the remote command reads /dev/null.
	NoStdin bool
	// Quiet is -q: no warnings on stderr.
	Quiet bool
	// Verbose counts -v: progress lines on stderr.
	Verbose int
	// ConnectionAttempts is -o ConnectionAttempts (default 1).
	ConnectionAttempts int
	// ConnectTimeout is -o ConnectTimeout; 0 when not given.
	ConnectTimeout time.Duration
	// Version is -V: print the version and exit.
	Version bool
	// Help is -h or --help: print Usage and exit 0 (OpenSSH has neither;
	// every command line tool is expected to).
	Help bool
	// Ignored lists the options accepted without effect, for debug lines.
	Ignored []string
	// Warnings are forwarding requests this client does not honour (-A,
	// -X, -Y, -o ForwardAgent=yes, ...), one line each.
	Warnings []string
}

// The letters of OpenSSH's ssh(1) command line, by what this client does
// with them. Every letter OpenSSH knows is here; a letter it does not know
// is a usage error, as in OpenSSH.
//
// Flags without an argument:
//
//	-n, -q, -v       see Options
//	-x, -a, -T, -C   no X11 / agent forwarding, no PTY: this client's only
//	                 behaviour; compression: x/crypto has none
//	-1 -2 -4 -6 -g -k -K -M -t -y
//	                 accepted without effect (a debug line with -v): protocol
//	                 and address-family choices, GSSAPI, multiplexing master,
//	                 a PTY (never requested: MPI daemons need none), syslog
//	-A, -X, -Y       agent / X11 forwarding requests: not supported; one
//	                 warning line on stderr (unless -q), then the command runs
//	                 without them (Open MPI adds -X for --xterm)
//	-V               prints this client's version and exits 0
//	-h, --help       print Usage and exit 0 (podmpi's own: OpenSSH has no
//	                 -h, and a worker's command never starts with one)
//	-f -N -s -G      refused: background after auth, no command, subsystem,
//	                 print the configuration change what ssh is asked to do
//
// Flags with an argument:
//
//	-p port, -i identity, -l user, -o option   see Options
//	-F configfile    accepted: no ssh_config is ever read
//	-b -c -e -m -B -E -I -S -P
//	                 accepted without effect (a debug line with -v): bind
//	                 address and interface, cipher and MAC lists (x/crypto
//	                 decides, following FIPS mode), escape character, log file,
//	                 PKCS#11 provider (the job key is always used), control
//	                 socket, tag
//	-L -R -D -W -w -J -O -Q
//	                 refused: port, stdio and tunnel forwarding, jump hosts,
//	                 multiplexing control commands and queries would change
//	                 what the connection does, and this client does none of
//	                 them
const (
	noArgFlags     = "nqvxaTC" + "1246gkKMty" + "AXY" + "Vh" + "fNsG"
	argFlags       = "pilo" + "F" + "bcemBEISP" + "LRDWwJOQ"
	ignoredNoArg   = "1246gkKMty"
	warnedNoArg    = "AXY"
	refusedNoArg   = "fNsG"
	ignoredWithArg = "bcemBEISP"
	refusedWithArg = "LRDWwJOQ"
)

// flagMeaning names what a refused, warned or ignored letter asks for.
var flagMeaning = map[byte]string{
	'f': "going to the background after authentication", 'N': "a connection without a remote command",
	's': "a subsystem", 'G': "printing the configuration",
	'L': "local port forwarding", 'R': "remote port forwarding", 'D': "dynamic (SOCKS) port forwarding",
	'W': "stdio forwarding", 'w': "tunnel device forwarding", 'J': "a jump host",
	'O': "a multiplexing control command", 'Q': "a query of supported algorithms",
	'A': "agent forwarding", 'X': "X11 forwarding", 'Y': "trusted X11 forwarding",
	'1': "protocol 1", '2': "protocol 2", '4': "IPv4 only", '6': "IPv6 only", 'g': "remote hosts on forwarded ports",
	'k': "no GSSAPI delegation", 'K': "GSSAPI authentication", 'M': "a multiplexing master", 't': "a pseudo-terminal",
	'y': "logging to syslog", 'b': "a bind address", 'c': "a cipher list", 'e': "an escape character",
	'm': "a MAC list", 'B': "a bind interface", 'E': "a log file", 'I': "a PKCS#11 provider", 'S': "a control socket",
	'P': "a tag",
}

// ignoredOptions are -o keys accepted without effect. They tune OpenSSH
// behaviour that this client does not have (known_hosts files, passwords,
// agents, multiplexing, logging) or that x/crypto decides (algorithms,
// which follow FIPS mode). Keys in no list are ignored too, with a debug
// line under -v; only the keys of refusedOptions and warnedOptions are
// looked at more closely.
var ignoredOptions = map[string]bool{
	"userknownhostsfile": true, "globalknownhostsfile": true, "loglevel": true, "batchmode": true,
	"passwordauthentication": true, "kbdinteractiveauthentication": true, "challengeresponseauthentication": true,
	"pubkeyauthentication": true, "preferredauthentications": true, "identitiesonly": true,
	"gssapiauthentication": true, "hostbasedauthentication": true, "numberofpasswordprompts": true,
	"checkhostip": true, "hashknownhosts": true, "updatehostkeys": true, "verifyhostkeydns": true,
	"visualhostkey": true, "compression": true, "tcpkeepalive": true, "serveraliveinterval": true, "serveralivecountmax": true,
	"controlmaster": true, "controlpath": true, "controlpersist": true, "requesttty": true,
	"addressfamily": true, "addkeystoagent": true, "identityagent": true,
	"kexalgorithms": true, "ciphers": true, "macs": true, "hostkeyalgorithms": true,
	"pubkeyacceptedalgorithms": true, "pubkeyacceptedkeytypes": true, "escapechar": true,
	"sendenv": true, "setenv": true, "exitonforwardfailure": true, "clearallforwardings": true,
	"gatewayports": true, "localcommand": true, "tunneldevice": true, "bindaddress": true, "bindinterface": true,
}

// refusedOptions are -o keys that would change where the client connects or
// what it does there; the value that means "off" is accepted. A key with
// value "" is refused whatever its value.
var refusedOptions = map[string]struct{ off, what string }{
	"hostname":                {"", "another host name than the one given"},
	"proxycommand":            {"none", "a proxy command"},
	"proxyjump":               {"none", "a jump host"},
	"localforward":            {"", "local port forwarding"},
	"remoteforward":           {"", "remote port forwarding"},
	"dynamicforward":          {"", "dynamic (SOCKS) port forwarding"},
	"tunnel":                  {"no", "tunnel device forwarding"},
	"remotecommand":           {"none", "a remote command from the configuration"},
	"sessiontype":             {"default", "a session without the given command"},
	"permitlocalcommand":      {"no", "running a local command"},
	"forkafterauthentication": {"no", "going to the background after authentication"},
}

// warnedOptions are forwarding requests this client cannot honour: with
// "yes" they get one warning line on stderr (unless -q), as -A and -X do.
var warnedOptions = map[string]string{
	"forwardagent": "agent forwarding", "forwardx11": "X11 forwarding", "forwardx11trusted": "trusted X11 forwarding",
}

// handledOptions are -o keys with an effect.
var handledOptions = map[string]bool{
	"port": true, "user": true, "identityfile": true, "connectionattempts": true,
	"connecttimeout": true, "stricthostkeychecking": true, "stdinnull": true,
}

// UsageError is a command line this client cannot accept.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ParseArgs parses the arguments (without argv[0]) that Open MPI 4/5, Hydra
// (MPICH, Intel MPI) and Horovod pass to their ssh program, the way
// OpenSSH's ssh(1) does:
//
//   - options before the host, then the host ([user@]host), then more
//     options (Horovod: "host -p 2222 -o ConnectTimeout=10 true"; Open MPI
//     puts a hostfile port after the host), until the first word that is
//     not an option: that word and all after it are the command, joined by
//     single spaces (" orted -mca ess \"env\" ..." keeps its leading space);
//   - "--" ends the options;
//   - combined flags ("-xq"), attached values ("-p2222", "-oPort=2222") and
//     "-o Key=Value", "-o 'Key Value'", "-o Key = Value";
//   - for -l/user@/-o User, -p/-o Port and every -o key the first value
//     wins, as in OpenSSH.
//
// Letters OpenSSH does not know, and options that would change what the
// connection does (forwarding, jump hosts, another host name), are errors
// (*UsageError) naming the option; options OpenSSH knows that have no
// meaning here are listed in Ignored, forwarding requests in Warnings (see
// the letters above and ignoredOptions). -V, -h and --help need no host.
func ParseArgs(args []string) (Options, error) {
	o := Options{Options: map[string]string{}, ConnectionAttempts: 1}
	i := 0
	hostSeen := false
	for i < len(args) {
		a := args[i]
		if a == "--" {
			i++
			if !hostSeen {
				if i >= len(args) {
					break
				}
				if err := o.setHost(args[i]); err != nil {
					return Options{}, err
				}
				hostSeen = true
				i++
			}
			break
		}
		if a == "--help" {
			o.Help = true
			i++
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			if hostSeen {
				break // the command starts here
			}
			if err := o.setHost(a); err != nil {
				return Options{}, err
			}
			hostSeen = true
			i++
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch {
			case strings.IndexByte(refusedNoArg, c) >= 0 || strings.IndexByte(refusedWithArg, c) >= 0:
				return Options{}, usagef("option -%c (%s) is refused: podmpi's ssh client runs one command on a worker and does no forwarding", c, flagMeaning[c])
			case strings.IndexByte(noArgFlags, c) >= 0:
				o.flag(c)
			case strings.IndexByte(argFlags, c) >= 0:
				val := a[j+1:]
				if val == "" {
					i++
					if i >= len(args) {
						return Options{}, usagef("option -%c needs an argument", c)
					}
					val = args[i]
				}
				if err := o.option(c, val); err != nil {
					return Options{}, err
				}
				j = len(a)
			default:
				return Options{}, usagef("unknown option -%s (OpenSSH has none either); podmpi's ssh client takes OpenSSH's options: -p port, -i file, -l user, -o Key=Value, [user@]host and a command (--help lists them)", printable(string(c)))
			}
		}
		i++
	}
	if !hostSeen && (o.Version || o.Help) {
		return o, nil
	}
	if !hostSeen {
		return Options{}, usagef("no host given; usage: rsh [options] [user@]host [options] command ...")
	}
	o.Command = strings.Join(args[i:], " ")
	return o, nil
}

func (o *Options) flag(c byte) {
	switch {
	case c == 'n':
		o.NoStdin = true
	case c == 'q':
		o.Quiet = true
	case c == 'v':
		o.Verbose++
	case c == 'V':
		o.Version = true
	case c == 'h':
		o.Help = true
	case strings.IndexByte(warnedNoArg, c) >= 0:
		o.Warnings = append(o.Warnings, fmt.Sprintf("-%c: %s is not supported; running the command without it", c, flagMeaning[c]))
	case strings.IndexByte(ignoredNoArg, c) >= 0:
		o.Ignored = append(o.Ignored, fmt.Sprintf("-%c (%s)", c, flagMeaning[c]))
	}
}

func (o *Options) option(c byte, val string) error {
	if val == "" && (c == 'i' || c == 'l') {
		return usagef("option -%c needs a non-empty argument", c)
	}
	switch c {
	case 'p':
		p, err := parsePort(val)
		if err != nil {
			return err
		}
		if o.Port == 0 { // -p and -o Port share one slot, first wins
			o.Port = p
		}
	case 'i':
		o.addIdentity(val)
	case 'l':
		if o.User == "" {
			o.User = val
		}
	case 'o':
		return o.setOption(val)
	case 'F':
		// No ssh_config is ever read; accepting -F keeps "-F /dev/null" working.
	default:
		o.Ignored = append(o.Ignored, fmt.Sprintf("-%c %s (%s)", c, printable(val), flagMeaning[c]))
	}
	return nil
}

func (o *Options) addIdentity(path string) {
	if o.Identity == "" {
		o.Identity = path
	}
	o.Identities = append(o.Identities, path)
}

func (o *Options) setHost(arg string) error {
	host := arg
	if at := strings.LastIndexByte(arg, '@'); at >= 0 {
		user := arg[:at]
		host = arg[at+1:]
		if user == "" {
			return usagef("empty user name in %q", printable(arg))
		}
		if o.User == "" {
			o.User = user
		}
	}
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1] // [::1]
	}
	if host == "" {
		return usagef("empty host name in %q", printable(arg))
	}
	if host[0] == '-' {
		return usagef("invalid host name %q: starts with '-'", printable(host))
	}
	for _, r := range host {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || strings.ContainsRune("/[]", r) {
			return usagef("invalid host name %q", printable(host))
		}
	}
	o.Host = host
	return nil
}

// setOption parses one -o argument: "Key=Value", "Key Value", "Key = Value".
func (o *Options) setOption(arg string) error {
	s := strings.TrimSpace(arg)
	k := strings.IndexFunc(s, func(r rune) bool { return r == '=' || unicode.IsSpace(r) })
	if k <= 0 {
		return usagef("-o %q: want Key=Value", printable(arg))
	}
	key := strings.ToLower(s[:k])
	val := strings.TrimSpace(s[k:])
	val = strings.TrimSpace(strings.TrimPrefix(val, "="))
	if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
		val = val[1 : len(val)-1]
	}
	if val == "" {
		return usagef("-o %s: missing value", printable(s[:k]))
	}
	if r, ok := refusedOptions[key]; ok && (r.off == "" || !strings.EqualFold(val, r.off)) {
		return usagef("-o %s=%s (%s) is refused: podmpi's ssh client connects only to the host given and does no forwarding", printable(s[:k]), printable(val), r.what)
	}
	if _, seen := o.Options[key]; seen {
		if key == "identityfile" {
			o.addIdentity(val)
		}
		return nil // first value wins
	}
	switch key {
	case "port":
		p, err := parsePort(val)
		if err != nil {
			return err
		}
		if o.Port == 0 { // else -p came first and wins
			o.Port = p
		}
	case "user":
		if o.User == "" {
			o.User = val
		}
	case "identityfile":
		o.addIdentity(val)
	case "connectionattempts":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 1000 {
			return usagef("-o ConnectionAttempts=%s: want a number from 1 to 1000", printable(val))
		}
		o.ConnectionAttempts = n
	case "connecttimeout":
		d, err := parseSeconds(val)
		if err != nil {
			return usagef("-o ConnectTimeout=%s: %v", printable(val), err)
		}
		o.ConnectTimeout = d
	case "stdinnull":
		b, ok := sshBool(val)
		if !ok {
			return usagef("-o StdinNull=%s: want yes or no", printable(val))
		}
		o.NoStdin = o.NoStdin || b
	case "stricthostkeychecking":
		switch strings.ToLower(val) {
		case "yes", "no", "ask", "accept-new", "off", "true", "false":
		default:
			return usagef("-o StrictHostKeyChecking=%s: want yes, no, accept-new, ask or off", printable(val))
		}
	}
	if what, ok := warnedOptions[key]; ok {
		if b, _ := sshBool(val); b {
			o.Warnings = append(o.Warnings, fmt.Sprintf("-o %s=%s: %s is not supported; running the command without it", printable(s[:k]), printable(val), what))
		}
	} else if !handledOptions[key] && !ignoredOptions[key] {
		if _, refused := refusedOptions[key]; !refused {
			o.Ignored = append(o.Ignored, fmt.Sprintf("-o %s=%s (unknown to podmpi's ssh client)", printable(s[:k]), printable(val)))
		}
	}
	o.Options[key] = val
	return nil
}

// sshBool reads an OpenSSH yes/no value.
func sshBool(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "yes", "true":
		return true, true
	case "no", "false":
		return false, true
	}
	return false, false
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, usagef("bad port %q: want 1-65535", printable(s))
	}
	return p, nil
}

// parseSeconds parses an OpenSSH time value: plain seconds ("10") or a Go
// duration ("1m30s"). "none" and 0 mean the default.
func parseSeconds(s string) (time.Duration, error) {
	if strings.EqualFold(s, "none") {
		return 0, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n > 86400 {
			return 0, errors.New("want 0-86400 seconds")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > 24*time.Hour {
		return 0, errors.New("want seconds, e.g. 10")
	}
	return d, nil
}

// printable quotes nothing but keeps control characters out of messages.
func printable(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}
