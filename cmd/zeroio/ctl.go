package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// zeroio ctl: the admin API (admin.go) from the shell.

const ctlUsage = `Usage: zeroio ctl [--admin ADDR] [--json] COMMAND [ARGS]

Talks to the admin API of a running zeroio relay (zeroio relay --admin).

Commands:
  routes                        each route's targets: state, weight, connections
  conns [--limit N] [--after ID] the stream connections in flight, a page at a time
  drain ROUTE TARGET            no new client for TARGET; its connections go on
  disable ROUTE TARGET          drain TARGET and pause its health checks
  enable ROUTE TARGET           undo drain or disable
  weight ROUTE TARGET N         set TARGET's weight (0 to 256; -1: the configured one)
  close ID                      close the stream connection ID

Changes last until the relay's next reload. TARGET is the target's URL
or its host:port.

Flags:
  --admin ADDR   the relay's admin address: host:port or unix:///path (default ` + defaultAdmin + `)
  --json         print the API's JSON instead of a table
`

// ctlFlags are zeroio ctl's command line.
type ctlFlags struct {
	admin, after string
	limit        int
	json         bool
	args         []string
}

func runCtl(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "zeroio ctl: %v\n", err)
		return 1
	}
	var f ctlFlags
	fs := flag.NewFlagSet("zeroio ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.admin, "admin", defaultAdmin, "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.IntVar(&f.limit, "limit", 0, "")
	fs.StringVar(&f.after, "after", "", "")
	help := fs.Bool("help", false, "")
	fs.BoolVar(help, "h", false, "")
	for {
		if err := fs.Parse(args); err != nil {
			return fail(fmt.Errorf("%v (see zeroio ctl --help)", err))
		}
		if fs.NArg() == 0 {
			break
		}
		f.args = append(f.args, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *help {
		io.WriteString(stdout, ctlUsage)
		return 0
	}
	if len(f.args) == 0 {
		io.WriteString(stderr, ctlUsage)
		return 2
	}
	c, err := newCtlClient(f.admin)
	if err != nil {
		return fail(err)
	}
	if err := f.run(c, stdout); err != nil {
		return fail(err)
	}
	return 0
}

// run does the command f.args names.
func (f *ctlFlags) run(c *ctlClient, stdout io.Writer) error {
	cmd, rest := f.args[0], f.args[1:]
	want := func(n int, what string) error {
		if len(rest) != n {
			return fmt.Errorf("%s takes %s", cmd, what)
		}
		return nil
	}
	var body []byte
	var err error
	switch cmd {
	case "routes":
		if err = want(0, "no argument"); err == nil {
			body, err = c.do("GET", "/routes", nil)
		}
	case "conns":
		q := url.Values{}
		if f.limit > 0 {
			q.Set("limit", fmt.Sprint(f.limit))
		}
		if f.after != "" {
			q.Set("after", f.after)
		}
		if err = want(0, "no argument (--limit N, --after ID)"); err == nil {
			body, err = c.do("GET", "/conns?"+q.Encode(), nil)
		}
	case "drain", "disable", "enable":
		if err = want(2, "ROUTE TARGET"); err == nil {
			body, err = c.do("POST", "/targets/"+cmd, url.Values{"route": {rest[0]}, "target": {rest[1]}})
		}
	case "weight":
		if err = want(3, "ROUTE TARGET WEIGHT"); err == nil {
			body, err = c.do("POST", "/targets/weight", url.Values{"route": {rest[0]}, "target": {rest[1]}, "weight": {rest[2]}})
		}
	case "close":
		if err = want(1, "a connection ID"); err == nil {
			body, err = c.do("POST", "/conns/close", url.Values{"id": {rest[0]}})
		}
	default:
		return fmt.Errorf("unknown command %q (see zeroio ctl --help)", cmd)
	}
	if err != nil {
		return err
	}
	if f.json {
		_, err = stdout.Write(body)
		return err
	}
	return printCtl(stdout, cmd, body)
}

// printCtl prints an answer of the admin API as a table, or a line.
func printCtl(w io.Writer, cmd string, body []byte) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch cmd {
	case "routes":
		var v struct{ Routes []adminRoute }
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		fmt.Fprintln(tw, "ROUTE\tTARGET\tSTATE\tHEALTH\tWEIGHT\tACTIVE\tCONNS\tDIAL ERRORS")
		for _, r := range v.Routes {
			for _, t := range r.Targets {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Name, t.Target, t.State, t.Health, t.Weight, t.Active, t.Connections, t.DialErrors)
			}
		}
	case "conns":
		var v struct {
			Conns []adminConn
			Next  uint64
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		fmt.Fprintln(tw, "ID\tROUTE\tCLIENT\tTARGET\tSTATE\tUP\tDOWN\tAGE")
		for _, c := range v.Conns {
			age := time.Duration(c.Age * float64(time.Second)).Round(time.Second)
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", c.ID, dash(c.Route), c.Client, dash(c.Target), c.State, c.BytesUp, c.BytesDown, age)
		}
		if v.Next != 0 {
			fmt.Fprintf(tw, "more: zeroio ctl conns --after %d\n", v.Next)
		}
	default:
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		switch {
		case cmd == "close":
			fmt.Fprintf(tw, "connection %v closed\n", v["id"])
		case cmd == "weight":
			fmt.Fprintf(tw, "%v %v: weight %v (was %v)\n", v["route"], v["target"], v["weight"], v["was"])
		default:
			fmt.Fprintf(tw, "%v %v: %v (was %v)\n", v["route"], v["target"], v["state"], v["was"])
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ctlClient calls the admin API at one address.
type ctlClient struct {
	hc   *http.Client
	base string
}

func newCtlClient(addr string) (*ctlClient, error) {
	network, address, err := adminListenAddr(addr, true)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, address)
	}}
	base := "http://" + address
	if network == "unix" {
		base = "http://zeroio"
	}
	return &ctlClient{hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, base: base}, nil
}

// do sends a request (form as a POST's body) and returns the answer's
// body; an error status is an error with the API's message.
func (c *ctlClient) do(method, path string, form url.Values) ([]byte, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return b, nil
}
