-- wrk script for bench/http.sh: GET balance and usage (by sku, day and meter)
-- of one account with its account key, in turn.
-- Usage: wrk ... -s bench/wrk/reports.lua http://ADDR -- ACCOUNT KEY
local paths = {}
local headers = {}
local n = 0

function init(args)
  local account, key = args[1], args[2]
  headers["Authorization"] = "Bearer " .. key
  local range = "from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z"
  paths = {
    "/v1/accounts/" .. account .. "/balance",
    "/v1/accounts/" .. account .. "/usage?" .. range .. "&by=sku",
    "/v1/accounts/" .. account .. "/balance",
    "/v1/accounts/" .. account .. "/usage?" .. range .. "&by=day",
    "/v1/accounts/" .. account .. "/usage?" .. range .. "&by=meter",
  }
end

function request()
  n = n + 1
  return wrk.format("GET", paths[(n % #paths) + 1], headers)
end
