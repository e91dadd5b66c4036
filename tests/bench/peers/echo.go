// The TCP echo benchmark's Go side (tests/bench/echo.sh):
//   echo server PORT                      a goroutine a connection, as net's users write it
//   echo client ADDR CONNS SIZE SECONDS   load: CONNS connections, each sends SIZE bytes and
//                                         waits for them back, again and again; prints
//                                         "messages/s p50_us p99_us"
//   echo idle ADDR CONNS                  opens CONNS connections, sends a byte on each, reads
//                                         it back, prints "ready" and holds them until stdin closes
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

func server(port string) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 65536)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}(c)
	}
}

func dial(addr string) net.Conn {
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "cannot connect to", addr)
	os.Exit(1)
	return nil
}

func client(addr string, conns, size int, secs float64) {
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dial(addr)
	}
	warm := time.Now().Add(500 * time.Millisecond)
	end := warm.Add(time.Duration(secs * float64(time.Second)))
	var mu sync.Mutex
	var all []time.Duration
	var count int64
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			buf := make([]byte, size)
			var lat []time.Duration
			var n int64
			for {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				if _, err := c.Write(msg); err != nil {
					break
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					break
				}
				if t0.After(warm) {
					lat = append(lat, time.Since(t0))
					n++
				}
			}
			mu.Lock()
			all = append(all, lat...)
			count += n
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	for _, c := range cs {
		c.Close()
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Microseconds())
	}
	fmt.Printf("%.0f %.0f %.0f\n", float64(count)/secs, pct(0.50), pct(0.99))
}

func idle(addr string, conns int) {
	cs := make([]net.Conn, conns)
	b := []byte{'x'}
	for i := range cs {
		cs[i] = dial(addr)
		cs[i].Write(b)
		if _, err := io.ReadFull(cs[i], b); err != nil {
			fmt.Fprintln(os.Stderr, "idle: no echo:", err)
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	for _, c := range cs {
		c.Close()
	}
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: echo server PORT | client ADDR CONNS SIZE SECONDS | idle ADDR CONNS")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "server":
		server(os.Args[2])
	case "client":
		conns, _ := strconv.Atoi(os.Args[3])
		size, _ := strconv.Atoi(os.Args[4])
		secs, _ := strconv.ParseFloat(os.Args[5], 64)
		client(os.Args[2], conns, size, secs)
	case "idle":
		conns, _ := strconv.Atoi(os.Args[3])
		idle(os.Args[2], conns)
	}
}
