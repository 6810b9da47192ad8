package cli

import (
	"slices"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// normalized is a command line as normalizeArgs leaves it.
type normalized struct {
	// args is the command line in the order urfave/cli parses.
	args []string
	// command is the innermost command named ("limits set"), "" for none;
	// cmd is that command, nil for none.
	command string
	cmd     *ucli.Command
	// unknown holds, by name, how each flag that no command defines was
	// written ("-x", "--x"): Go's flag package names it with one dash
	// whatever the user typed.
	unknown map[string]string
}

// normalizeArgs reorders args (args[0] is the program name) into the only
// order urfave/cli v2 parses, which stops reading flags at a command's
// first positional argument:
//
//	prog [global flags] cmd [flags] [sub [flags]]... [--] [positional args]
//
// so that a person may write "drain KEY NODE --wait" or
// "keys --database-url URL".
//
// A flag belongs to the innermost command that defines it, else to the app
// when it is a global flag, and is written with its name and two dashes
// ("-o" becomes "--output", so that "-o json --output table" lets the last
// win as "-o json -o table" does). An unknown flag is kept where it was
// found, as it was written, for the parser to reject.
//
// A flag that takes a value takes the next argument unless written
// --name=value. One that ends the line after a command, or that is followed
// by another of the command's or the global flags ("--database-url
// --output=json", as an unset variable leaves it), is a usage error: the
// parser would take the command's name, its first argument or the next
// flag as the value, and --database-url would then connect to another
// database than the one meant.
//
// With the help flag (not --help=false), a command's positional arguments
// are dropped: help needs none. "--" ends flag parsing: everything after it
// is positional but for the names of commands right after it, which still
// name the command; it is put after the innermost command's flags, before
// the positional arguments, so that "drain KEY -- -NODE" is
// "drain -- KEY -NODE" and "limits -- get -KEY" is "limits get -- -KEY".
// "help CMD SUB..." is read as "CMD SUB... --help", and "help help" as
// "--help".
func normalizeArgs(app *ucli.App, args []string) (normalized, error) {
	if len(args) == 0 {
		return normalized{args: args}, nil
	}
	if len(args) > 2 && (args[1] == "help" || args[1] == "h") && !strings.HasPrefix(args[2], "-") {
		// "help migrate reset" is "migrate reset --help": the help
		// command explains only its first argument, and without its
		// subcommands and flags. Flags after the command names are
		// dropped: help needs none ("help keys -o" would lack a value).
		names := 2
		for names < len(args) && !strings.HasPrefix(args[names], "-") {
			names++
		}
		if args[2] == "help" || args[2] == "h" {
			// "help help" is fleetctl's help, which lists the help
			// command.
			names = 2
		}
		args = append(append([]string{args[0]}, args[2:names]...), "--help")
	}
	type level struct {
		name  string
		cmd   *ucli.Command // nil for the app
		flags []string
		// help is whether the level's last help flag asks for help.
		help bool
	}
	levels := []*level{{name: args[0]}}
	// pathTo names the commands of the first k levels; path all of them.
	pathTo := func(k int) string {
		var names []string
		for _, l := range levels[1:k] {
			names = append(names, l.cmd.Name)
		}
		return strings.Join(names, " ")
	}
	path := func() string { return pathTo(len(levels)) }
	var positional []string
	var valueless string     // the first value flag given no value
	var valuelessGlobal bool // whether it is a global flag
	var parentFlag string    // the first flag given to a command whose subcommand then follows
	parentAt := 0            // the level it was given to
	// parentErr reports the first such flag; a request for help, at any
	// level, wins over it ("keys -o json create --help").
	var parentErr error
	checkParent := func() {
		if parentErr == nil && parentFlag != "" && parentAt == len(levels)-2 {
			// "keys -o json create k": the flag is the group's
			// own, which the subcommand that runs would ignore.
			parentErr = inCommand(path(), usageErrorf("flag %s belongs to %q, not to %q",
				parentFlag, pathTo(parentAt+1), path()))
		}
	}
	dashDash := false
	unknown := map[string]string{}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		cur := levels[len(levels)-1]
		if a == "--" {
			// Command names are no flags: those right after "--" still
			// name the command, and "--" goes after them.
			dashDash = true
			for i++; len(positional) == 0 && i < len(rest); i++ {
				sub := findCommand(subcommandsOf(app, levels[len(levels)-1].cmd), rest[i])
				if sub == nil {
					break
				}
				levels = append(levels, &level{name: rest[i], cmd: sub})
				checkParent() // "keys -o json -- create k" too
			}
			positional = append(positional, rest[i:]...)
			break
		}
		if isFlag(a) {
			name, hasValue := flagName(a)
			target := cur
			f := findFlag(flagsOf(app, cur.cmd), name)
			if f == nil && cur.cmd != nil {
				if g := findFlag(app.Flags, name); g != nil {
					f, target = g, levels[0]
				}
			}
			if f != nil {
				a = "--" + f.Names()[0]
				if _, v, ok := strings.Cut(rest[i], "="); ok {
					a += "=" + v
				}
			}
			target.flags = append(target.flags, a)
			if f != nil && f != ucli.HelpFlag && target == cur && cur.cmd != nil && parentFlag == "" {
				parentFlag, _, _ = strings.Cut(rest[i], "=")
				parentAt = len(levels) - 1
			}
			switch {
			case f == nil:
				if _, ok := unknown[name]; !ok {
					typed, _, _ := strings.Cut(a, "=")
					unknown[name] = typed
				}
				if !hasValue && i+2 < len(rest) && misplacedValueFlag(app, cur.cmd, name, rest[i+2:]) {
					// "-o json keys": the value is the flag's, so that
					// "keys" names the command the flag belongs to.
					i++
					target.flags = append(target.flags, rest[i])
				}
			case f == ucli.HelpFlag:
				target.help = true
				if _, v, ok := strings.Cut(a, "="); ok {
					// --help=false is no request for help; a value
					// that is no boolean is the parser's to reject.
					on, err := strconv.ParseBool(v)
					target.help = on || err != nil
				}
			case takesValue(f) && !hasValue:
				if i+1 == len(rest) && len(levels) > 1 || i+1 < len(rest) && isKnownFlag(app, cur.cmd, rest[i+1]) {
					if valueless == "" {
						valueless, valuelessGlobal = a, target == levels[0]
					}
				} else if i+1 < len(rest) {
					i++
					target.flags = append(target.flags, rest[i])
				}
			}
			continue
		}
		if len(positional) == 0 {
			if sub := findCommand(subcommandsOf(app, cur.cmd), a); sub != nil {
				levels = append(levels, &level{name: a, cmd: sub})
				checkParent()
				continue
			}
		}
		positional = append(positional, a)
	}
	if parentErr != nil && !slices.ContainsFunc(levels, func(l *level) bool { return l.help }) {
		return normalized{}, parentErr
	}
	if valueless != "" {
		errorf := usageErrorf
		if valuelessGlobal {
			errorf = globalUsageErrorf
		}
		return normalized{}, inCommand(path(), errorf("flag needs an argument: %s", valueless))
	}
	n := normalized{args: make([]string, 0, len(args)), command: path(), cmd: levels[len(levels)-1].cmd, unknown: unknown}
	help := false
	for _, l := range levels {
		n.args = append(n.args, l.name)
		n.args = append(n.args, l.flags...)
		help = help || l.help
	}
	if help && len(levels) > 1 && (len(positional) == 0 || len(n.cmd.Subcommands) == 0) {
		// "nodes KEY --help" asks for the command's help; its arguments
		// would be read as the name of a subcommand to explain. A
		// command group's first argument ("migrate bogus --help") is
		// kept: it names no subcommand, which the parser reports.
		return n, nil
	}
	if dashDash {
		n.args = append(n.args, "--")
	}
	n.args = append(n.args, positional...)
	return n, nil
}

// typed returns how the flag called name, which no command defines, was
// written: as normalizeArgs recorded it, else as the first argument that
// names it (normalizeArgs keeps an unknown flag as it was written), else
// with one dash, as Go's flag package names it.
func (n normalized) typed(name string) string {
	if typed, ok := n.unknown[name]; ok {
		return typed
	}
	for _, a := range n.args {
		if isFlag(a) && a != "--" {
			if got, _ := flagName(a); got == name {
				typed, _, _ := strings.Cut(a, "=")
				return typed
			}
		}
	}
	return "-" + name
}

// misplacedValueFlag reports whether the flag called name, which cmd (nil
// for the app) does not define, is a flag taking a value of a command that
// rest begins by naming, a subcommand of cmd's or one below it: a flag
// written, with its value, before its command.
func misplacedValueFlag(app *ucli.App, cmd *ucli.Command, name string, rest []string) bool {
	for _, a := range rest {
		cmd = findCommand(subcommandsOf(app, cmd), a)
		if cmd == nil {
			return false
		}
		if f := findFlag(cmd.Flags, name); f != nil {
			return takesValue(f)
		}
	}
	return false
}

// groupOwning returns the path of the deepest command group on path (the
// commands' names, space-separated), path's own command left out, that
// defines the flag called name; "" if none does.
func groupOwning(app *ucli.App, path, name string) string {
	names := strings.Fields(path)
	owner := ""
	var cmd *ucli.Command
	for i, n := range names[:max(len(names)-1, 0)] {
		if cmd = findCommand(subcommandsOf(app, cmd), n); cmd == nil {
			break
		}
		if findFlag(cmd.Flags, name) != nil {
			owner = strings.Join(names[:i+1], " ")
		}
	}
	return owner
}

// isFlag reports whether arg is written as a flag: a dash and more.
func isFlag(arg string) bool { return len(arg) > 1 && arg[0] == '-' }

// isKnownFlag reports whether arg is written as a flag that cmd (nil for
// the app) or the app defines.
func isKnownFlag(app *ucli.App, cmd *ucli.Command, arg string) bool {
	if !isFlag(arg) {
		return false
	}
	name, _ := flagName(arg)
	return findFlag(flagsOf(app, cmd), name) != nil || findFlag(app.Flags, name) != nil
}

// flagName returns the name of a flag argument ("--to=3" → "to", true).
func flagName(arg string) (name string, hasValue bool) {
	name = strings.TrimLeft(arg, "-")
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue
}

func flagsOf(app *ucli.App, cmd *ucli.Command) []ucli.Flag {
	if cmd == nil {
		return app.Flags
	}
	return cmd.Flags
}

func subcommandsOf(app *ucli.App, cmd *ucli.Command) []*ucli.Command {
	if cmd == nil {
		return app.Commands
	}
	return cmd.Subcommands
}

// findFlag returns the flag called name among flags; the help flag, which
// urfave/cli adds to every command, counts as defined everywhere.
func findFlag(flags []ucli.Flag, name string) ucli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	for _, n := range ucli.HelpFlag.Names() {
		if n == name {
			return ucli.HelpFlag
		}
	}
	return nil
}

func findCommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func takesValue(f ucli.Flag) bool {
	if v, ok := f.(interface{ TakesValue() bool }); ok {
		return v.TakesValue()
	}
	return true
}
