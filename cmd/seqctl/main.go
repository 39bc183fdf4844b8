// Command seqctl is a thin command-line client of the seqd admin plane.
//
//	seqctl [-admin 127.0.0.1:7070[,host:port...]] [-timeout 5s] [-token-file F]
//	       [-tls-ca F] [-tls-cert F] [-tls-key F] [-insecure] [-log-level L]
//	       [-log-format text|json] [-version] <command> [flags]
//
// Commands:
//
//	status [-o text|json]           print a member's status (-json: -o json)
//	health [-service S]             exit 0 if the server reports SERVING
//	set-mode MODE                   switch the data-path mode (mutating)
//	advance VALUE                   move the counter forward past VALUE: a time or
//	                                +DURATION (hybrid), +N (counter), a raw value (mutating)
//	transfer-leader                 hand HA leadership to a standby (mutating)
//	get [-n N] [-o text|json]       get timestamps through the data path, read in the
//	                                server's format
//	decode [-o text|json] TS        a hybrid timestamp's physical time and logical part
//	members [-o text|json] [ADDR..] an HA group's leader and standbys
//	version                         print seqctl's version
//
// -admin takes one address or a comma-separated list (every member of an
// HA group; an IPv6 host in brackets, [::1]:7070), the same list loadgen's
// and seqd-pd's -admin take. Every flag before the command can be set by
// a SEQCTL_ variable (SEQCTL_ADMIN for -admin; -h shows each); an unknown
// SEQCTL_ variable is an error. Read-only commands (status, health) ask
// the first member that answers; mutating ones (set-mode, advance,
// transfer-leader) reach the leader, following a standby's redirect;
// members asks every member.
//
// Mutating commands need authorisation when the server has it on: a
// bearer token (-token-file, the first token of a file like the server's
// -admin-token-file) or a client certificate (-tls-cert, -tls-key). -tls-ca
// (or a client certificate) turns TLS on; without it seqctl speaks
// plaintext, which it uses on loopback addresses only, unless -insecure
// chooses plaintext off loopback too.
//
// Exit status: 0 on success, 1 when the command fails (including a server
// that is not SERVING), 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/internal/envflag"
	"github.com/seqd/seqd/internal/logflag"
	"github.com/seqd/seqd/internal/version"
	"github.com/seqd/seqd/spec"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// A command is one seqctl subcommand. Adding one (set-mode, advance,
// transfer-leader) is a new entry in commands.
type command struct {
	name    string
	args    string // synopsis of the arguments, for usage
	summary string
	// run parses args (the arguments after the command name) and does
	// the work. It returns a usageError for bad arguments.
	run func(ctx context.Context, e *env, args []string) error
}

var commands = []command{
	{"status", "[-o text|json]", "print the status of the first -admin member that answers (-json: the same as -o json)", runStatus},
	{"health", "[-service name]", "exit 0 if the server reports SERVING", runHealth},
	{"set-mode", strings.Join(spec.Modes, "|"), "switch the data-path mode at run time (to one the server registers)", runSetMode},
	{"advance", "VALUE", "move the counter forward: every later value is above VALUE, a time or +DURATION (hybrid), +N (counter), or a raw value", runAdvance},
	{"transfer-leader", "", "hand HA leadership to a standby and print the new leader", runTransferLeader},
	{"get", "[-n N] [-o text|json]", "get timestamps through the data path (the client library)", runGet},
	{"decode", "[-o text|json] TS", "print a hybrid timestamp's physical time and logical part", runDecode},
	{"members", "[-o text|json] [ADDR...]", "list every member of an HA group: role, term, epoch, mode, format, version, uptime (-admin A,B,C or ADDR...)", runMembers},
	{"version", "", "print seqctl's version (stamped at build time)", runVersion},
}

// env is what every command gets: where to write, and how to reach the
// admin server.
type env struct {
	stdout, stderr io.Writer
	addr           string
	opts           []grpc.DialOption
	log            *slog.Logger // -log-level, -log-format
}

// group is the -admin address list (one address, or every member of an
// HA group); a malformed list is a usage error.
func (e *env) group() (*adminclient.Group, error) {
	g, err := adminclient.NewGroup(e.addr, e.opts...)
	if err != nil {
		return nil, usageError{"-admin: " + strings.TrimPrefix(err.Error(), "admin: ")}
	}
	g.Redirected = func(from, to string) {
		fmt.Fprintf(e.stderr, "seqctl: %s is a standby; the leader is %s\n", from, to)
	}
	return g, nil
}

// onAny calls f with a client of the first -admin member that answers,
// for read-only calls any member serves (status, health), and returns
// that member's address.
func (e *env) onAny(ctx context.Context, f func(addr string, cc *grpc.ClientConn) error) (string, error) {
	g, err := e.group()
	if err != nil {
		return "", err
	}
	return g.Any(ctx, f)
}

// onLeader calls f with a client of the group's leader: it starts with the
// -admin members in turn and follows a standby's NOT_LEADER redirect to
// the leader it names. Mutating commands act on the leader.
func (e *env) onLeader(ctx context.Context, f func(adminpb.AdminClient) error) error {
	g, err := e.group()
	if err != nil {
		return err
	}
	_, err = g.Leader(ctx, func(_ string, cc *grpc.ClientConn) error { return f(adminpb.NewAdminClient(cc)) })
	return err
}

// security turns the TLS, token and -insecure flags into dial options.
func security(sec *adminclient.ClientSecurity) ([]grpc.DialOption, error) {
	opts, err := sec.DialOptions()
	if errors.Is(err, adminclient.ErrSecurityFlags) {
		return nil, usageError{err.Error()}
	}
	return opts, err
}

// usageError is a bad command line: run prints it with the usage and exits 2.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// run is seqctl's main, factored out for tests: args excludes the program
// name, and the result is the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runEnv(args, stdout, stderr, os.Environ())
}

// runEnv is run with the environment (KEY=value, as os.Environ).
func runEnv(args []string, stdout, stderr io.Writer, environ []string) int {
	fs := flag.NewFlagSet("seqctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin", adminclient.DefaultAddr, "admin server `addresses`: host:port, or every member of an HA group comma separated (IPv6 in brackets); mutating commands follow the leader")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on the whole command")
	var sec adminclient.ClientSecurity
	sec.Register(fs)
	var lf logflag.Config
	lf.RegisterLevel(fs, slog.LevelWarn)
	showVersion := fs.Bool("version", false, "print seqctl's version and exit (as the version command)")
	fs.Usage = func() { usage(fs, stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if _, err := envflag.FromEnv(fs, envflag.PrefixSeqctl, environ); err != nil {
		fmt.Fprintf(stderr, "seqctl: %v\n", err)
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, "seqctl", version.Version)
		return exitOK
	}
	log, err := lf.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "seqctl: %v\n", err)
		return exitUsage
	}
	if fs.NArg() == 0 {
		usage(fs, stderr)
		return exitUsage
	}
	name := fs.Arg(0)
	if name == "help" {
		usage(fs, stdout)
		return exitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "seqctl: unknown command %q\n", name)
		usage(fs, stderr)
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "seqctl: -timeout must be positive\n")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	opts, err := security(&sec)
	if err == nil {
		err = cmd.run(ctx, &env{stdout: stdout, stderr: stderr, addr: *addr, opts: opts, log: log}, fs.Args()[1:])
	}
	var uerr usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "seqctl %s: %v\nusage: seqctl [flags] %s %s\n", cmd.name, err, cmd.name, cmd.args)
		return exitUsage
	default:
		msg := describe(cmd.name, err)
		if w := wayOut(*addr, err); w != "" {
			msg += " (" + w + ")"
		}
		fmt.Fprintf(stderr, "seqctl %s: %s\n", cmd.name, msg)
		return exitFail
	}
}

// describe renders err, the failure of command cmd, for a person: a gRPC
// status as "Code: message" (not "rpc error: code = ... desc = ..."),
// with the kind and the command said once (the server's messages start
// with the kind in words, "invalid argument: set-mode: ...").
func describe(cmd string, err error) string {
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		rest := strings.TrimPrefix(s.Message(), codeWords(s.Code())+": ")
		rest = strings.TrimPrefix(rest, cmd+": ")
		msg = s.Code().String() + ": " + rest
	}
	return msg
}

// wayOut is what to do about err, the failure of a command against the
// servers at admin; empty when err says it already.
func wayOut(admin string, err error) string {
	switch {
	case errors.Is(err, adminclient.ErrUnavailable) || errors.Is(err, client.ErrUnavailable) || status.Code(err) == codes.Unavailable:
		return fmt.Sprintf("is seqd running at -admin %s? Start it, or give its admin address with -admin HOST:PORT", admin)
	case status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied:
		return "pass the server's token with -token-file FILE, or a client certificate it allows with -tls-cert and -tls-key"
	}
	return ""
}

// codeWords is a gRPC code as words: FailedPrecondition is "failed
// precondition", the form the server's messages start with.
func codeWords(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseFlags parses a command's flags, turning errors into usageErrors.
// The flag package has already printed the details to stderr.
func parseFlags(fs *flag.FlagSet, e *env, args []string) error {
	fs.SetOutput(e.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return usageError{"help requested"}
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	return nil
}

// parseArgs parses a command's flags and wants exactly n positional
// arguments after them, which it returns.
func parseArgs(fs *flag.FlagSet, e *env, args []string, n int, what string) ([]string, error) {
	fs.SetOutput(e.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, usageError{"help requested"}
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() != n {
		return nil, usageError{fmt.Sprintf("want %s, got %q", what, fs.Args())}
	}
	return fs.Args(), nil
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: seqctl [flags] <command> [command flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-15s %-20s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, "\nflags:\n")
	envflag.Usage(w, fs, envflag.PrefixSeqctl)
}
