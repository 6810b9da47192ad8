package cli

import (
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
//	prog [global flags] cmd [flags] [sub [flags]]... [positional args]
//
// so that a person may write "drain KEY NODE --wait" or
// "keys --database-url URL". A flag belongs to the innermost command that
// defines it, else to the app when it is a global flag; an unknown flag is
// kept where it was found, for the parser to reject. A flag that takes a
// value takes the next argument unless written --name=value; one that
// ends the line after a command is a usage error, which the parser would
// otherwise never see: moved before the positional arguments (or, for a
// global flag, before the command), it would take the first of them (or
// the command's name) as its value. With the help flag (not
// --help=false), a command's positional arguments are dropped: help needs
// none. "--" ends flag parsing: it and everything after it stay positional.
// "help CMD SUB..." is read as "CMD SUB... --help".
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
	path := func() string {
		var names []string
		for _, l := range levels[1:] {
			names = append(names, l.cmd.Name)
		}
		return strings.Join(names, " ")
	}
	var positional []string
	unknown := map[string]string{}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		cur := levels[len(levels)-1]
		if a == "--" {
			positional = append(positional, rest[i:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' {
			name, hasValue := flagName(a)
			target := cur
			f := findFlag(flagsOf(app, cur.cmd), name)
			if f == nil && cur.cmd != nil {
				if g := findFlag(app.Flags, name); g != nil {
					f, target = g, levels[0]
				}
			}
			target.flags = append(target.flags, a)
			if f == nil {
				if _, ok := unknown[name]; !ok {
					typed, _, _ := strings.Cut(a, "=")
					unknown[name] = typed
				}
			}
			if f == ucli.HelpFlag {
				target.help = true
				if _, v, ok := strings.Cut(a, "="); ok {
					// --help=false is no request for help; a value
					// that is no boolean is the parser's to reject.
					on, err := strconv.ParseBool(v)
					target.help = on || err != nil
				}
			}
			if f != nil && takesValue(f) && !hasValue {
				if i+1 == len(rest) && len(levels) > 1 {
					return normalized{}, inCommand(path(), usageErrorf("flag needs an argument: --%s", f.Names()[0]))
				}
				if i+1 < len(rest) {
					i++
					target.flags = append(target.flags, rest[i])
				}
			}
			continue
		}
		if len(positional) == 0 {
			if sub := findCommand(subcommandsOf(app, cur.cmd), a); sub != nil {
				levels = append(levels, &level{name: a, cmd: sub})
				continue
			}
		}
		positional = append(positional, a)
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
	n.args = append(n.args, positional...)
	return n, nil
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
