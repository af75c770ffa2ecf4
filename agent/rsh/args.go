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
}

// Flags without an argument that are accepted. Their ssh(1) meaning either
// is this client's only behaviour or does not apply to it:
//
//	-x, -a   no X11 / agent forwarding: never offered
//	-X       X11 forwarding (Open MPI adds it with --xterm): not supported, ignored
//	-T, -t   no / forced PTY: mpirun's daemons need none; no PTY is ever requested
//	-C       compression: ignored
//	-n, -q, -v  see Options
const noArgFlags = "xXaTtCnqv"

// Flags with an argument: -p port, -i identity, -l user, -o option and
// -F configfile (accepted and ignored: no ssh_config is read).
const argFlags = "pilo" + "F"

// ignoredOptions are -o keys accepted without effect. They tune OpenSSH
// behaviour that this client does not have (known_hosts files, passwords,
// agents, multiplexing, logging) or that x/crypto decides (algorithms,
// which follow FIPS mode).
var ignoredOptions = map[string]bool{
	"userknownhostsfile": true, "globalknownhostsfile": true, "loglevel": true, "batchmode": true,
	"passwordauthentication": true, "kbdinteractiveauthentication": true, "challengeresponseauthentication": true,
	"pubkeyauthentication": true, "preferredauthentications": true, "identitiesonly": true,
	"gssapiauthentication": true, "hostbasedauthentication": true, "numberofpasswordprompts": true,
	"checkhostip": true, "hashknownhosts": true, "updatehostkeys": true, "verifyhostkeydns": true,
	"visualhostkey": true, "forwardagent": true, "forwardx11": true, "forwardx11trusted": true,
	"compression": true, "tcpkeepalive": true, "serveraliveinterval": true, "serveralivecountmax": true,
	"controlmaster": true, "controlpath": true, "controlpersist": true, "requesttty": true,
	"addressfamily": true, "addkeystoagent": true, "identityagent": true,
	"kexalgorithms": true, "ciphers": true, "macs": true, "hostkeyalgorithms": true,
	"pubkeyacceptedalgorithms": true, "pubkeyacceptedkeytypes": true, "escapechar": true,
	"sendenv": true, "setenv": true, "exitonforwardfailure": true, "clearallforwardings": true,
}

// handledOptions are -o keys with an effect.
var handledOptions = map[string]bool{
	"port": true, "user": true, "identityfile": true, "connectionattempts": true,
	"connecttimeout": true, "stricthostkeychecking": true,
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
// Unknown flags and -o keys are errors (*UsageError) naming the option.
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
				return Options{}, usagef("unsupported option -%s; podmpi rsh accepts -x -X -a -T -t -C -n -q -v, -p port, -i file, -l user, -o key=value, -F file, [user@]host and a command", printable(string(c)))
			}
		}
		i++
	}
	if !hostSeen {
		return Options{}, usagef("no host given; usage: rsh [options] [user@]host [options] command ...")
	}
	o.Command = strings.Join(args[i:], " ")
	return o, nil
}

func (o *Options) flag(c byte) {
	switch c {
	case 'n':
		o.NoStdin = true
	case 'q':
		o.Quiet = true
	case 'v':
		o.Verbose++
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
	if !handledOptions[key] && !ignoredOptions[key] {
		return usagef("-o %s: unsupported option; podmpi rsh honours Port, User, IdentityFile, ConnectionAttempts, ConnectTimeout, StrictHostKeyChecking and ignores OpenSSH-only ones such as UserKnownHostsFile, LogLevel, BatchMode", printable(s[:k]))
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
	case "stricthostkeychecking":
		switch strings.ToLower(val) {
		case "yes", "no", "ask", "accept-new", "off", "true", "false":
		default:
			return usagef("-o StrictHostKeyChecking=%s: want yes, no, accept-new, ask or off", printable(val))
		}
	}
	o.Options[key] = val
	return nil
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
