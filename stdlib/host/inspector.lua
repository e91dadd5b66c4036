-- The inspector (--inspect ADDRESS; docs/LUA_API.md, The inspector): a page of the live
-- processes at /, their data as JSON at /api/processes, a terminate at
-- POST /api/terminate?pid=..., and Prometheus' text format at /metrics.
-- The host serves it itself (HttpServer::serve_internal, host/program/main.cpp):
-- an acceptor process (http.server:serve_internal) starts, for each
-- connection, a process running serve_connection, which calls handle with
-- each request. Those processes are left out of what it shows.
-- Anyone who can reach the address can stop processes: loopback only.
local json = require("json")
local stats = require("host.stats")

local M = {}

-- The connection processes' entry and the acceptor's (the host's own, left
-- out of the counts). The acceptor gives each connection's process the
-- address the inspector is bound to (its configuration's bound).
local OWN = "host.inspector:serve_connection"
local OWN_ACCEPTOR = "http.server:serve_internal"
local bound  -- "IP:PORT"
function M.serve_connection(sock, id, conf_id)
  bound = require("host.http").server_conf(conf_id, "bound")
  return require("http.conn").serve(sock, id, conf_id)
end

-- Whom the inspector answers. A web page the developer opens elsewhere can
-- send requests here too: through DNS rebinding its own name comes to
-- point at this address (its requests carry that name as Host), and a
-- form or a no-cors fetch can POST from its origin. So every request must
-- name this server in Host (its address, or a loopback name with its
-- port), and a POST that carries an Origin must come from such a host.
local function allowed_hosts()
  local ip, port = tostring(bound):match("^(.*):(%d+)$")
  local ok = {}
  if not ip then return ok, false end
  ok[ip .. ":" .. port] = true
  for _, name in ipairs { "localhost", "127.0.0.1", "[::1]" } do ok[name .. ":" .. port] = true end
  if port == "80" then  -- a browser leaves the default port out
    ok[ip] = true
    for _, name in ipairs { "localhost", "127.0.0.1", "[::1]" } do ok[name] = true end
  end
  -- Bound to every address: any IP literal reaches it (a rebound name never
  -- comes as one).
  return ok, port, ip == "0.0.0.0" or ip == "[::]"
end

local function ip_literal(host, port)
  local ip, p = host:match("^(.*):(%d+)$")
  if p ~= port then return false end
  return ip:match("^%d+%.%d+%.%d+%.%d+$") ~= nil or ip:match("^%[[%x:.]+%]$") ~= nil
end

local function host_allowed(host)
  if type(host) ~= "string" then return false end
  host = host:lower()
  local ok, port, any = allowed_hosts()
  return ok[host] == true or (any and ip_literal(host, port))
end

-- Why the request is refused, or nil.
local function cross_site(req)
  if not host_allowed(req.headers.host) then return "the Host header does not name the inspector" end
  local origin = req.headers.origin
  if req.method ~= "GET" and req.method ~= "HEAD" and origin ~= nil then
    local host = type(origin) == "string" and origin:lower():match("^http://([^/]+)$")
    if not host or not host_allowed(host) then return "the request comes from another origin" end
  end
  return nil
end

-- Rows per answer at most: the page asks for a filter beyond that, so a
-- host with 100k processes answers in a bounded size.
local MAX_ROWS = 2000

local function pid_list(t)
  local out = {}
  for i, p in ipairs(t or {}) do out[i] = tostring(p) end
  return setmetatable(out, json.array_mt)
end

local function describe(pid, info)
  return {
    pid = tostring(pid), entry = info.entry, status = info.status, mailbox = info.mailbox,
    memory = info.memory, steps = info.steps, started = info.started,
    links = pid_list(info.links), monitors = pid_list(info.monitors),
    monitored_by = pid_list(info.monitored_by), names = pid_list(info.names),
    parent = info.parent,  -- who spawned it (the host tracks it under --inspect)
  }
end

-- The processes matching filter (a plain substring of the PID, entry,
-- status or a name), at most limit of them, and how many matched.
local function processes(filter, limit)
  local rows, matched = {}, 0
  for _, pid in ipairs(process.list()) do
    local info = process.info(pid)
    if info and info.entry ~= OWN and info.entry ~= OWN_ACCEPTOR then
      local ok = filter == nil or filter == ""
      if not ok then
        local hay = tostring(pid) .. " " .. tostring(info.entry) .. " " .. info.status .. " " ..
          table.concat(pid_list(info.names), " ")
        ok = hay:find(filter, 1, true) ~= nil
      end
      if ok then
        matched = matched + 1
        if #rows < limit then rows[#rows + 1] = describe(pid, info) end
      end
    end
  end
  return rows, matched
end

local JSON = { ["content-type"] = "application/json", ["cache-control"] = "no-store" }

local function api_processes(req)
  local limit = math.min(tonumber(req.query.limit) or 500, MAX_ROWS)
  local filter = type(req.query.filter) == "string" and req.query.filter or nil
  local rows, matched = processes(filter, limit)
  local s = stats()
  return 200, JSON, json.encode({
    time = time.now(), processes = setmetatable(rows, json.array_mt), matched = matched,
    total = s.processes, stats = s,
  })
end

local function api_terminate(req)
  if req.method ~= "POST" then return 405, { allow = "POST" }, "use POST\n" end
  local pid = req.query.pid
  if type(pid) ~= "string" or not pid:match("^<%d+%.%d+%.%d+>$") then
    return 400, JSON, json.encode({ error = "invalid: pid must look like <0.5.1>" })
  end
  local info = process.info(pid)
  if not info or info.entry == OWN or info.entry == OWN_ACCEPTOR then
    return 404, JSON, json.encode({ error = "not_found: no live process " .. pid })
  end
  local ok, err = process.terminate(pid)
  if not ok and err then
    if tostring(err):match("^not_found") then return 404, JSON, json.encode({ error = err }) end
    return 400, JSON, json.encode({ error = err })
  end
  log.info("inspector: terminated %s (%s) for %s", pid, tostring(info.entry), tostring(req.remote))
  return 200, JSON, json.encode({ terminated = pid })
end

local METRICS = {
  { "processes", "gauge", "Live processes." },
  { "messages", "counter", "Messages sent since the host started." },
  { "steps", "counter", "Times the scheduler ran a process." },
  { "spawns", "counter", "Processes spawned." },
  { "failures", "counter", "Processes that ended failed." },
  { "steals", "counter", "Processes a worker took from another's queue." },
  { "parks", "counter", "Times a worker went to sleep for want of work." },
}

local function metrics()
  local s = stats()
  local out = {}
  for _, m in ipairs(METRICS) do
    local name = "host_" .. m[1] .. (m[2] == "counter" and "_total" or "")
    out[#out + 1] = "# HELP " .. name .. " " .. m[3]
    out[#out + 1] = "# TYPE " .. name .. " " .. m[2]
    out[#out + 1] = string.format("%s %.0f", name, s[m[1]])
  end
  local statm = fs.read("/proc/self/statm")
  local pages = statm and tonumber(statm:match("^%d+%s+(%d+)"))
  if pages then
    out[#out + 1] = "# HELP process_resident_memory_bytes Resident memory of the host."
    out[#out + 1] = "# TYPE process_resident_memory_bytes gauge"
    out[#out + 1] = string.format("process_resident_memory_bytes %.0f", pages * 4096)
  end
  return 200, { ["content-type"] = "text/plain; version=0.0.4; charset=utf-8" }, table.concat(out, "\n") .. "\n"
end

local PAGE -- below

function M.handle(req)
  local refused = cross_site(req)
  if refused then
    return 403, { ["content-type"] = "text/plain; charset=utf-8", ["cache-control"] = "no-store" },
      "forbidden: " .. refused .. "\n"
  end
  local path = req.path
  if path == "/" or path == "/index.html" then
    return 200, { ["content-type"] = "text/html; charset=utf-8", ["cache-control"] = "no-store" }, PAGE
  elseif path == "/metrics" then
    return metrics()
  elseif path == "/api/processes" then
    return api_processes(req)
  elseif path == "/api/terminate" then
    return api_terminate(req)
  end
  return 404, { ["content-type"] = "text/plain" }, "not found: " .. path .. "\n"
end

PAGE = [[<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>host inspector</title>
<style>
body{font:14px system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.3em;margin:.2em 0}
#counters span{display:inline-block;margin-right:1.5em}
#counters b{font-variant-numeric:tabular-nums}
table{border-collapse:collapse;width:100%;margin-top:.8em}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;font-variant-numeric:tabular-nums;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0}
td.num{text-align:right}
.rel{font-size:.85em;color:#555}
.rel a{color:#06c;cursor:pointer;text-decoration:none;margin-right:.3em}
tr.hl{background:#fff6d5}
button{cursor:pointer}
#note{color:#060;margin-left:1em}
#error{color:#a00;margin-left:1em}
</style></head><body>
<h1>host inspector</h1>
<div id="counters"></div>
<p><label>Filter <input id="filter" placeholder="PID, entry, status or name" size="40"></label>
<span id="shown"></span><span id="note"></span><span id="error"></span></p>
<table><thead><tr><th>PID</th><th>entry</th><th>status</th><th>mailbox</th><th>memory</th>
<th>steps/s</th><th>names</th><th>relations</th><th></th></tr></thead><tbody id="rows"></tbody></table>
<script>
"use strict";
let last = null, lastStats = null, timer = null;
const $ = id => document.getElementById(id);
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));}
function kb(n){return n>=1048576?(n/1048576).toFixed(1)+" MB":(n/1024).toFixed(1)+" KB";}
function rel(label, pids){
  if(!pids.length) return "";
  return label+": "+pids.map(p=>'<a data-pid="'+esc(p)+'">'+esc(p)+'</a>').join("")+" ";
}
// The rows as the spawn tree: each process under the one that spawned it
// (where that one is shown too), in the order they came.
function tree(list){
  const shown = {}, kids = {}, roots = [], out = [];
  for (const p of list) shown[p.pid] = true;
  for (const p of list) {
    if (p.parent && shown[p.parent] && p.parent !== p.pid) (kids[p.parent] = kids[p.parent] || []).push(p);
    else roots.push(p);
  }
  const stack = roots.slice().reverse().map(p => [p, 0]);
  while (stack.length) {
    const [p, d] = stack.pop();
    out.push([p, d]);
    const k = kids[p.pid] || [];
    for (let i = k.length - 1; i >= 0; i--) stack.push([k[i], d + 1]);
  }
  return out;
}
async function refresh(){
  const f = $("filter").value;
  let data;
  try {
    const r = await fetch("/api/processes?limit=500&filter="+encodeURIComponent(f));
    data = await r.json();
  } catch(e) { $("error").textContent = "host unreachable"; return; }
  $("error").textContent = "";
  const s = data.stats, dt = lastStats ? data.time-lastStats.time : 0;
  const rate = k => dt>0 ? ((s[k]-lastStats.stats[k])/dt).toFixed(0)+"/s" : "";
  $("counters").innerHTML = ["processes","messages","steps","spawns","failures","steals","parks"].map(k =>
    '<span>'+k+' <b id="stat-'+k+'">'+s[k]+'</b> '+(k==="processes"?"":rate(k))+'</span>').join("");
  const prev = {};
  if(last) for(const p of last.processes) prev[p.pid]=p.steps;
  const rows = tree(data.processes).map(([p, depth]) => {
    const sr = dt>0 && prev[p.pid]!==undefined ? ((p.steps-prev[p.pid])/dt).toFixed(1) : "";
    return '<tr data-pid="'+esc(p.pid)+'"><td class="pid" style="padding-left:'+(6+depth*14)+'px">'+
      (depth?"&#x2514; ":"")+esc(p.pid)+'</td><td>'+esc(p.entry)+'</td><td class="status">'+
      esc(p.status)+'</td><td class="num mailbox">'+p.mailbox+'</td><td class="num">'+kb(p.memory)+'</td><td class="num">'+sr+
      '</td><td>'+esc(p.names.join(", "))+'</td><td class="rel">'+rel("spawned by",p.parent?[p.parent]:[])+rel("links",p.links)+rel("monitors",p.monitors)+
      rel("monitored by",p.monitored_by)+'</td><td><button class="terminate" data-pid="'+esc(p.pid)+'">terminate</button></td></tr>';
  });
  $("rows").innerHTML = rows.join("");
  $("shown").textContent = "showing "+data.processes.length+" of "+data.matched+" matching ("+data.total+" live)";
  last = data; lastStats = data;
}
$("rows").addEventListener("click", async ev => {
  const t = ev.target;
  if(t.matches("a[data-pid]")) { $("filter").value = t.dataset.pid; refresh(); return; }
  if(!t.matches("button.terminate")) return;
  const r = await fetch("/api/terminate?pid="+encodeURIComponent(t.dataset.pid), {method:"POST"});
  $("note").textContent = r.status===200 ? "terminated "+t.dataset.pid : r.status===404 ? t.dataset.pid+" had already ended" : "terminate failed ("+r.status+")";
  refresh();
});
$("filter").addEventListener("input", () => { last = null; refresh(); });
refresh();
timer = setInterval(refresh, 1000);
</script></body></html>
]]

return M
