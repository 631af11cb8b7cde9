#version 310 es
layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    uint _m8;
    uint _m9;
};

layout(binding = 0, std430) readonly buffer _12_11
{
    float _m0[];
} _11;

layout(binding = 1, std430) readonly buffer _15_14
{
    float _m0[];
} _14;

layout(binding = 2, std430) readonly buffer _18_17
{
    float _m0[];
} _17;

layout(binding = 3, std430) buffer _21_20
{
    float _m0[];
} _20;

layout(binding = 4, std430) readonly buffer _24_23
{
    _4 _m0;
} _23;

shared float _26[256];
shared float _29[256];

float _32(float _31)
{
    float _42 = abs(_31);
    float _45 = 1.0 / (1.0 + (0.3275910913944244384765625 * _42));
    return sign(_31) * (1.0 - ((_45 * (0.254829585552215576171875 + (_45 * ((-0.284496724605560302734375) + (_45 * (1.42141377925872802734375 + (_45 * ((-1.45315206050872802734375) + (_45 * 1.0614054203033447265625))))))))) * exp((-_42) * _42)));
}

float _65(float _63, uint _64)
{
    switch (_64)
    {
        case 1u:
        {
            return max(_63, 0.0);
        }
        case 2u:
        {
            return clamp(_63, 0.0, 6.0);
        }
        case 3u:
        {
            return _63 / (1.0 + exp(-_63));
        }
        case 4u:
        {
            return (0.5 * _63) * (1.0 + _32(_63 * 0.707106769084930419921875));
        }
        case 5u:
        {
            return 1.0 / (1.0 + exp(-_63));
        }
        case 6u:
        {
            return _63 / (1.0 + exp((-1.5957691669464111328125) * (_63 + (((0.0447149984538555145263671875 * _63) * _63) * _63))));
        }
        case 7u:
        {
            return (_63 * clamp(_63 + 3.0, 0.0, 6.0)) / 6.0;
        }
        default:
        {
            return _63;
        }
    }
    return 0.0;
}

void main()
{
    float _129 = 0.0;
    uint _131 = 0u;
    float _133 = 0.0;
    float _135 = 0.0;
    float _139 = 0.0;
    uvec2 _176 = uvec2(4294967295u);
    uvec2 _259 = uvec2(4294967295u);
    uint _145 = (gl_WorkGroupID.y * 16u) + gl_LocalInvocationID.y;
    uint _149 = (gl_WorkGroupID.x * 16u) + gl_LocalInvocationID.x;
    uint _153 = (gl_WorkGroupID.x * 16u) + gl_LocalInvocationID.y;
    uint _159 = gl_WorkGroupID.z * _23._m0._m6;
    uint _164 = gl_WorkGroupID.z * _23._m0._m7;
    for (;;)
    {
        if (all(equal(uvec2(0u), _176)))
        {
            break;
        }
        _176 -= uvec2(uint(_176.y == 0u), 1u);
        if (!(_131 < _23._m0._m1))
        {
            break;
        }
        uint _197 = _131 + gl_LocalInvocationID.x;
        _133 = 0.0;
        if ((_145 < _23._m0._m0) && (_197 < _23._m0._m1))
        {
            _133 = _11._m0[(_159 + (_145 * _23._m0._m1)) + _197];
        }
        _26[(gl_LocalInvocationID.y * 16u) + gl_LocalInvocationID.x] = _133;
        _135 = 0.0;
        if ((_153 < _23._m0._m2) && (_197 < _23._m0._m1))
        {
            _135 = _14._m0[(_164 + ((_23._m0._m3 + _153) * _23._m0._m4)) + (_197 * _23._m0._m5)];
        }
        _29[(gl_LocalInvocationID.y * 16u) + gl_LocalInvocationID.x] = _135;
        barrier();
        uint _137 = 0u;
        for (;;)
        {
            if (all(equal(uvec2(0u), _259)))
            {
                break;
            }
            _259 -= uvec2(uint(_259.y == 0u), 1u);
            if (!(_137 < 16u))
            {
                break;
            }
            _129 += (_26[(gl_LocalInvocationID.y * 16u) + _137] * _29[(gl_LocalInvocationID.x * 16u) + _137]);
            _137++;
            continue;
        }
        barrier();
        _131 += 16u;
        continue;
    }
    if ((_145 < _23._m0._m0) && (_149 < _23._m0._m2))
    {
        _139 = _129;
        if (_23._m0._m8 != 0u)
        {
            _139 += _17._m0[_149];
        }
        _20._m0[(((gl_WorkGroupID.z * _23._m0._m0) + _145) * _23._m0._m2) + _149] = _65(_139, _23._m0._m9);
        return;
    }
    else
    {
        return;
    }
}

