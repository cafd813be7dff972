package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand. run gets the arguments after the command's
// name and returns the exit status; it prints errors itself, one line each.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

// commands is the subcommand table. A new command lives in its own file
// (bench.go defines benchCommand) and adds one line here.
var commands = []command{
	{"relay", "forward TCP, Unix and UDP traffic (zeroio relay --help)", runRelay},
	{"ctl", "see and change a running relay through its admin API (zeroio ctl --help)", runCtl},
	{"bench", "measure zeroio against its peers (zeroio bench --help)", runBench},
	{"version", "print the version and build information", runVersion},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "relay" {
			relayHelpAll(stdout) // every flag; zeroio relay --help is short
			return 0
		}
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "zeroio: unknown command %q (run zeroio help)\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "zeroio: the fastest, most trustworthy way to move network bytes.")
	fmt.Fprintln(w, "\nUsage: zeroio COMMAND [arguments]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}
