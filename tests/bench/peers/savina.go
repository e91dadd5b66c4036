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
	"math"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"sync"
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
	n := pick(quick, 20000, 1000000)
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
	n := pick(quick, 20000, 5000000)
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
	n := pick(quick, 2000, 150000)
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

func fjThroughput(quick bool) time.Duration {
	actors, n := 40, pick(quick, 2000, 100000)
	done := make(chan int, actors)
	inboxes := make([]chan struct{}, actors)
	for i := range inboxes {
		inbox := make(chan struct{}, mailbox)
		inboxes[i] = inbox
		go func() {
			x := 0.0
			for k := 0; k < n; k++ {
				<-inbox
				for j := 1; j <= 10; j++ {
					x += math.Sqrt(float64(j)) * math.Sin(float64(j))
				}
			}
			_ = x
			done <- n
		}()
	}
	t0 := time.Now()
	for k := 0; k < n; k++ {
		for _, inbox := range inboxes {
			inbox <- struct{}{}
		}
	}
	sum := 0
	for i := 0; i < actors; i++ {
		sum += <-done
	}
	must(sum == actors*n, "lost work")
	return time.Since(t0)
}

type bigMsg struct {
	ping bool
	from int
}

func big(quick bool) time.Duration {
	workers, n := 100, pick(quick, 500, 10000)
	inboxes := make([]chan bigMsg, workers)
	for i := range inboxes {
		inboxes[i] = make(chan bigMsg, mailbox)
	}
	done := make(chan int, workers)
	start := make(chan struct{})
	for i := 0; i < workers; i++ {
		me := i
		go func() {
			rng := (me + 1) * 7919
			sent := 0
			ping := func() {
				rng = (rng*1103515245 + 12345) % 2147483648
				j := rng % workers
				if j == me {
					j = (j + 1) % workers
				}
				inboxes[j] <- bigMsg{ping: true, from: me}
				sent++
			}
			<-start
			ping()
			for m := range inboxes[me] {
				if m.ping {
					inboxes[m.from] <- bigMsg{ping: false, from: me}
				} else if sent < n {
					ping()
				} else {
					done <- sent
				}
			}
		}()
	}
	t0 := time.Now()
	close(start)
	pings := 0
	for i := 0; i < workers; i++ {
		pings += <-done
	}
	must(pings == workers*n, "lost pings")
	return time.Since(t0)
}

type meet struct {
	reply chan string
	color string
}

func complement(a, b string) string {
	if a == b {
		return a
	}
	for _, c := range []string{"blue", "red", "yellow"} {
		if c != a && c != b {
			return c
		}
	}
	return a
}

func chameneos(quick bool) time.Duration {
	creatures, meetings := 10, pick(quick, 20000, 600000)
	mall := make(chan meet, mailbox)
	met := make(chan int, creatures)
	colors := []string{"blue", "red", "yellow"}
	t0 := time.Now()
	for i := 0; i < creatures; i++ {
		color := colors[i%3]
		go func() {
			reply := make(chan string, 1)
			count := 0
			for {
				mall <- meet{reply, color}
				other := <-reply
				if other == "" {
					met <- count
					return
				}
				color = complement(color, other)
				count++
			}
		}()
	}
	var waiting *meet
	done, stopped, total := 0, 0, 0
	for stopped < creatures {
		select {
		case m := <-mall:
			if done >= meetings {
				m.reply <- ""
			} else if waiting != nil {
				waiting.reply <- m.color
				m.reply <- waiting.color
				waiting = nil
				done++
			} else {
				mm := m
				waiting = &mm
			}
		case c := <-met:
			stopped++
			total += c
		}
	}
	must(total == 2*meetings, "meetings counted wrong")
	return time.Since(t0)
}

// request: a call and its reply with a timeout, as Go code does it: the
// request carries a reply channel, the caller waits on it or on a timer
// that it stops once answered.
type call struct {
	n     int
	reply chan int
}

func request(quick bool) time.Duration {
	n := pick(quick, 5000, 200000)
	calls := make(chan call, mailbox)
	go func() {
		for c := range calls {
			c.reply <- c.n + 1
		}
	}()
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		reply := make(chan int, 1)
		calls <- call{i, reply}
		timer := time.NewTimer(5 * time.Second)
		select {
		case v := <-reply:
			must(v == i+1, "request: wrong reply")
		case <-timer.C:
			must(false, "request: timeout")
		}
		timer.Stop()
	}
	d := time.Since(t0)
	close(calls)
	return d
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
	n, want := 24, 46368
	if quick {
		n, want = 14, 377
	}
	res := make(chan int, 1)
	t0 := time.Now()
	go fibp(n, res)
	must(<-res == want, "fib")
	return time.Since(t0)
}

// rssKB reads this process's resident set size from /proc/self/status.
func rssKB() int {
	b, err := os.ReadFile("/proc/self/status")
	must(err == nil, "read /proc/self/status")
	m := regexp.MustCompile(`VmRSS:\s+(\d+)`).FindSubmatch(b)
	must(m != nil, "VmRSS in /proc/self/status")
	kb, _ := strconv.Atoi(string(m[1]))
	return kb
}

// idleMemory: N goroutines, each with its mailbox, blocked in receive; the
// RSS they add, per goroutine, is printed as "MEMORY idle_memory KB".
func idleMemory(quick bool) time.Duration {
	n := pick(quick, 10000, 100000)
	before := rssKB()
	t0 := time.Now()
	boxes := make([]chan int, n)
	var started sync.WaitGroup
	started.Add(n)
	for i := range boxes {
		box := make(chan int, mailbox)
		boxes[i] = box
		go func() {
			started.Done()
			for range box {
			}
		}()
	}
	started.Wait()
	d := time.Since(t0)
	fmt.Printf("MEMORY idle_memory %.2f\n", float64(rssKB()-before)/float64(n))
	for _, box := range boxes {
		close(box)
	}
	return d
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: savina-go NAME [--quick]")
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "version" {
		// The Go release this binary was built with, for compare.sh's header.
		fmt.Println(runtime.Version())
		return
	}
	quick := len(os.Args) > 2 && os.Args[2] == "--quick"
	var d time.Duration
	switch name {
	case "pingpong":
		d = pingpong(quick)
	case "counting":
		d = counting(quick)
	case "threadring100":
		d = threadring(100, pick(quick, 20000, 2000000))
	case "threadring1000":
		d = threadring(1000, pick(quick, 10000, 1000000))
	case "fj_throughput":
		d = fjThroughput(quick)
	case "big":
		d = big(quick)
	case "chameneos":
		d = chameneos(quick)
	case "fj_create":
		d = fjCreate(quick)
	case "fib":
		d = fib(quick)
	case "request", "server_call":
		// The host's server.call is a request with a server's dispatch
		// around it; in Go both are a goroutine answering on a reply channel.
		d = request(quick)
	case "idle_memory":
		d = idleMemory(quick)
	default:
		fmt.Fprintln(os.Stderr, "unknown benchmark", name)
		os.Exit(2)
	}
	fmt.Printf("RESULT %s %.6f\n", name, d.Seconds())
}
