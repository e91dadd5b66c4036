// The Savina shapes of scripts/bench in idiomatic Go (goroutines and
// channels), same parameters.
//
//	go build -o build/savina-go tests/bench/peers/savina.go
//	build/savina-go NAME [--quick]
//
// Prints "RESULT NAME SECONDS"; checks each result like the host does.
package main

import (
	"fmt"
	"os"
	"time"
)

func pick(quick bool, q, f int) int {
	if quick {
		return q
	}
	return f
}

func must(ok bool, what string) {
	if !ok {
		fmt.Fprintln(os.Stderr, "wrong result:", what)
		os.Exit(1)
	}
}

// A mailbox is a buffered channel, as an actor's inbox would be.
const mailbox = 256

func pingpong(quick bool) time.Duration {
	n := pick(quick, 20000, 200000)
	ping, pong := make(chan int, mailbox), make(chan int, mailbox)
	go func() {
		for i := range ping {
			pong <- i
		}
	}()
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		ping <- i
		must(<-pong == i, "pingpong out of step")
	}
	return time.Since(t0)
}

func counting(quick bool) time.Duration {
	n := pick(quick, 20000, 200000)
	inc, total := make(chan struct{}, mailbox), make(chan int)
	done := make(chan struct{})
	go func() {
		t := 0
		for {
			select {
			case <-inc:
				t++
			case <-done:
				// Drain what was sent before the total was asked for.
				for len(inc) > 0 {
					<-inc
					t++
				}
				total <- t
				return
			}
		}
	}()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		inc <- struct{}{}
	}
	close(done)
	must(<-total == n, "counter lost messages")
	return time.Since(t0)
}

func threadring(size, hops int) time.Duration {
	chans := make([]chan int, size)
	for i := range chans {
		chans[i] = make(chan int, mailbox)
	}
	done := make(chan int)
	for i := 0; i < size; i++ {
		in, out := chans[i], chans[(i+1)%size]
		go func() {
			for k := range in {
				if k == 0 {
					done <- 0
					continue
				}
				out <- k - 1
			}
		}()
	}
	t0 := time.Now()
	chans[0] <- hops
	must(<-done == 0, "ring ended wrong")
	return time.Since(t0)
}

func fjCreate(quick bool) time.Duration {
	n := pick(quick, 2000, 20000)
	results := make(chan int, mailbox)
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		in := make(chan int, 1)
		go func() { results <- <-in }()
		in <- i
	}
	sum := 0
	for i := 0; i < n; i++ {
		sum += <-results
	}
	must(sum == n*(n+1)/2, "wrong sum")
	return time.Since(t0)
}

func fibp(n int, parent chan<- int) {
	if n < 2 {
		parent <- n
		return
	}
	me := make(chan int, 2)
	go fibp(n-1, me)
	go fibp(n-2, me)
	parent <- <-me + <-me
}

func fib(quick bool) time.Duration {
	n, want := 17, 1597
	if quick {
		n, want = 14, 377
	}
	res := make(chan int, 1)
	t0 := time.Now()
	go fibp(n, res)
	must(<-res == want, "fib")
	return time.Since(t0)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: savina-go NAME [--quick]")
		os.Exit(2)
	}
	name := os.Args[1]
	quick := len(os.Args) > 2 && os.Args[2] == "--quick"
	var d time.Duration
	switch name {
	case "pingpong":
		d = pingpong(quick)
	case "counting":
		d = counting(quick)
	case "threadring100":
		d = threadring(100, pick(quick, 20000, 200000))
	case "threadring1000":
		d = threadring(1000, pick(quick, 10000, 100000))
	case "fj_create":
		d = fjCreate(quick)
	case "fib":
		d = fib(quick)
	default:
		fmt.Fprintln(os.Stderr, "unknown benchmark", name)
		os.Exit(2)
	}
	fmt.Printf("RESULT %s %.6f\n", name, d.Seconds())
}
