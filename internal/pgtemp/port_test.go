package pgtemp

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// A port that another (non-Postgres) process holds answers the first
// connection attempts before the new server fails to bind it: that is a
// port in use (which Start, on a port it chose, retries with another),
// not a connection error that no wait cures.
func TestForeignListenerIsAPortInUse(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		if os.Getenv("FLEET_REQUIRE_PG") == "1" || os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 1024)
				_, _ = c.Read(buf)
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
				c.Close()
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Port: ln.Addr().(*net.TCPAddr).Port})
	if err == nil {
		c.Stop()
		t.Fatal("started on a port another process holds")
	}
	t.Logf("port in use recognised: %v\nerr: %.300v", errors.Is(err, errPortInUse), err)
	if !errors.Is(err, errPortInUse) {
		t.Error("a port another process holds is not recognised as in use: Start(Port: 0) would not retry another port")
	}
}
