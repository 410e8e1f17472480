-- Argo CD health check for serving.spyre.dev/SpyreModel.
--
-- A status only counts once the operator has seen the current spec: while
-- status.observedGeneration (or a condition's observedGeneration) is behind
-- metadata.generation the model is Progressing, whatever the old conditions say.
-- Then: Degraded=True -> Degraded; Progressing=True -> Progressing;
-- Available=True -> Healthy; Available=False with reason ScaledToZero (spec.replicas 0)
-- -> Suspended; anything else -> Progressing (waiting to become available).
-- Written for Argo CD's Lua (gopher-lua, Lua 5.1); tested with lua5.1.
local hs = {}

local function describe(cond, fallback)
  if cond.message ~= nil and cond.message ~= "" then
    if cond.reason ~= nil and cond.reason ~= "" then
      return cond.reason .. ": " .. cond.message
    end
    return cond.message
  end
  if cond.reason ~= nil and cond.reason ~= "" then
    return cond.reason
  end
  return fallback
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the spyre-operator to report a status"
  return hs
end

local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the spyre-operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = {}
if obj.status.conditions ~= nil then
  for _, cond in ipairs(obj.status.conditions) do
    if cond.type ~= nil then
      conditions[cond.type] = cond
    end
  end
end

-- A condition set for an older generation says nothing about the current spec.
for _, cond in pairs(conditions) do
  if generation ~= nil and cond.observedGeneration ~= nil and cond.observedGeneration < generation then
    hs.status = "Progressing"
    hs.message = "Waiting for condition " .. cond.type .. " to be updated for generation " .. tostring(generation)
    return hs
  end
end

local degraded = conditions["Degraded"]
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "Degraded")
  return hs
end

local progressing = conditions["Progressing"]
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(progressing, "Progressing")
  return hs
end

local available = conditions["Available"]
if available ~= nil and available.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(available, "Available")
  return hs
end

if available ~= nil and available.reason == "ScaledToZero" then
  hs.status = "Suspended"
  hs.message = describe(available, "ScaledToZero")
  return hs
end

hs.status = "Progressing"
if available ~= nil then
  hs.message = describe(available, "Waiting for the model to become available")
else
  hs.message = "Waiting for the model to become available"
end
return hs
