#version 430
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _5
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    float _m8;
};

layout(binding = 0, std430) readonly buffer _13_12
{
    float _m0[];
} _12;

layout(binding = 1, std430) readonly buffer _16_15
{
    float _m0[];
} _15;

layout(binding = 2, std430) readonly buffer _19_18
{
    float _m0[];
} _18;

layout(binding = 3, std430) buffer _22_21
{
    float _m0[];
} _21;

layout(binding = 4, std430) readonly buffer _25_24
{
    _5 _m0;
} _24;

shared float _27[128];
shared float _30[64];

uint _33(uint _35, uint _36)
{
    return _35 / ((_36 == 0u) ? 1u : _36);
}

void main()
{
    float _75 = 0.0;
    uint _65 = 0u;
    float _79 = 0.0;
    float _68 = 0.0;
    float _70 = 0.0;
    float _73 = 0.0;
    uint _62 = 0u;
    float _66 = -1000000015047466219876688855040.0;
    float _69 = 0.0;
    uvec2 _171 = uvec2(4294967295u);
    uvec2 _199 = uvec2(4294967295u);
    uvec2 _246 = uvec2(4294967295u);
    uvec2 _284 = uvec2(4294967295u);
    uint _91 = _24._m0._m4;
    uint _99 = _33(gl_WorkGroupID.x, _33(_24._m0._m2, _24._m0._m3));
    uint _101 = _24._m0._m2;
    uint _104 = ((gl_WorkGroupID.y * _101) + gl_WorkGroupID.x) * _91;
    uint _107 = _24._m0._m5;
    uint _109 = (_99 * _107) * _91;
    if (gl_LocalInvocationIndex < _91)
    {
        _27[gl_LocalInvocationIndex] = _12._m0[_104 + gl_LocalInvocationIndex];
    }
    if ((gl_LocalInvocationIndex + 64u) < _91)
    {
        _27[gl_LocalInvocationIndex + 64u] = _12._m0[(_104 + gl_LocalInvocationIndex) + 64u];
    }
    barrier();
    uint _132 = _24._m0._m1 + gl_WorkGroupID.y;
    _62 = _24._m0._m1 + _24._m0._m0;
    if (_24._m0._m6 != 0u)
    {
        _62 = _132 + 1u;
        if ((_24._m0._m7 > 0u) && ((_132 + 1u) > _24._m0._m7))
        {
            _65 = (_132 + 1u) - _24._m0._m7;
        }
    }
    uint _71 = _65;
    for (;;)
    {
        if (all(equal(uvec2(0u), _171)))
        {
            break;
        }
        _171 -= uvec2(uint(_171.y == 0u), 1u);
        if (!(_71 < _62))
        {
            break;
        }
        uint _190 = _71 + gl_LocalInvocationIndex;
        _73 = -1000000015047466219876688855040.0;
        if (_190 < _62)
        {
            _75 = 0.0;
            uint _77 = 0u;
            for (;;)
            {
                if (all(equal(uvec2(0u), _199)))
                {
                    break;
                }
                _199 -= uvec2(uint(_199.y == 0u), 1u);
                if (!(_77 < _91))
                {
                    break;
                }
                _75 += (_27[_77] * _15._m0[(_109 + (_190 * _91)) + _77]);
                _77++;
                continue;
            }
            _73 = _75 * _24._m0._m8;
        }
        _30[gl_LocalInvocationIndex] = _73;
        barrier();
        uint _240 = min(64u, (_62 - _71));
        _79 = _66;
        uint _81 = 0u;
        for (;;)
        {
            if (all(equal(uvec2(0u), _246)))
            {
                break;
            }
            _246 -= uvec2(uint(_246.y == 0u), 1u);
            if (!(_81 < _240))
            {
                break;
            }
            _79 = max(_79, _30[_81]);
            _81++;
            continue;
        }
        float _273 = exp(_66 - _79);
        _68 *= _273;
        _69 *= _273;
        _70 *= _273;
        uint _83 = 0u;
        for (;;)
        {
            if (all(equal(uvec2(0u), _284)))
            {
                break;
            }
            _284 -= uvec2(uint(_284.y == 0u), 1u);
            if (!(_83 < _240))
            {
                break;
            }
            float _306 = exp(_30[_83] - _79);
            _68 += _306;
            uint _313 = _109 + ((_71 + _83) * _91);
            if (gl_LocalInvocationIndex < _91)
            {
                _69 += (_306 * _18._m0[_313 + gl_LocalInvocationIndex]);
            }
            if ((gl_LocalInvocationIndex + 64u) < _91)
            {
                _70 += (_306 * _18._m0[(_313 + gl_LocalInvocationIndex) + 64u]);
            }
            _83++;
            continue;
        }
        _66 = _79;
        barrier();
        _71 += 64u;
        continue;
    }
    if (gl_LocalInvocationIndex < _91)
    {
        _21._m0[_104 + gl_LocalInvocationIndex] = _69 / _68;
    }
    if ((gl_LocalInvocationIndex + 64u) < _91)
    {
        _21._m0[(_104 + gl_LocalInvocationIndex) + 64u] = _70 / _68;
        return;
    }
    else
    {
        return;
    }
}

